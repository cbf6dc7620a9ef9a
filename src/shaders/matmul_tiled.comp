// Tiled fp32 GEMM: each workgroup of 16x16 threads computes a BM x BN tile of C (BM = 16*TM,
// BN = 16*TN), staging BK-deep slices of opA and opB in shared memory; each thread accumulates a
// TM x TN register micro-tile. Every output is one thread's sum over k in increasing order, so
// results are deterministic. Grid: x = N tiles, y = M tiles, z = batch entries.
//
// The micro-tile is interleaved (rows ty + 16*i, columns tx + 16*j), so for a 32-wide warp the
// shared-memory reads are one broadcast address (A) and 16 consecutive words (B): no bank
// conflicts without vector loads. Global loads pick the thread order that walks each operand's
// contiguous dimension, so they coalesce for every transpose combination; the next slice is
// fetched into registers while the current one is multiplied.
#version 460
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#define LOCAL_SIZE 256
#define TX 16  // threads along N
#define TY 16  // threads along M
layout(local_size_x = LOCAL_SIZE) in;

layout(constant_id = 0) const uint TM = 4;   // micro-tile rows per thread
layout(constant_id = 1) const uint TN = 4;   // micro-tile columns per thread
layout(constant_id = 2) const uint BK = 16;  // k-depth of a shared slice (BM*BK, BN*BK multiples of 256)
layout(constant_id = 3) const bool TRANS_A = false;
layout(constant_id = 4) const bool TRANS_B = false;

const uint BM = TY * TM;
const uint BN = TX * TN;
// Shared slices are k-major; one word of padding per row breaks the bank pattern of the
// transposing stores (rows of A without TRANS_A, rows of B with TRANS_B).
const uint SA = BM + 1;
const uint SB = BN + 1;
const uint LA = BM * BK / LOCAL_SIZE;  // elements of A each thread loads per slice
const uint LB = BN * BK / LOCAL_SIZE;

shared float As[BK * SA];
shared float Bs[BK * SB];

#include "matmul_push.glsl"

void main() {
  const uint tid = gl_LocalInvocationIndex;
  const uint tx = tid % TX, ty = tid / TX;
  const uint z = gl_WorkGroupID.z;
  const uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN;
  const uint abase = z * p.sa, bbase = z * p.sb;

  float ra[LA], rb[LB];
  float acc[TM][TN];
  [[unroll]] for (uint i = 0; i < TM; ++i)
    [[unroll]] for (uint j = 0; j < TN; ++j) acc[i][j] = 0.0;

  // Slice element e of A is (mm, kk); consecutive threads take consecutive addresses.
  #define A_COORDS(e, mm, kk) \
    if (TRANS_A) { mm = (e) % BM; kk = (e) / BM; } else { kk = (e) % BK; mm = (e) / BK; }
  #define B_COORDS(e, nn, kk) \
    if (TRANS_B) { kk = (e) % BK; nn = (e) / BK; } else { nn = (e) % BN; kk = (e) / BN; }

  uint k0 = 0;
  // Out-of-range elements load as zero, so the k tail adds exact zeros and needs no branch.
  [[unroll]] for (uint l = 0; l < LA; ++l) {
    uint mm, kk;
    A_COORDS(l * LOCAL_SIZE + tid, mm, kk);
    const uint m = m0 + mm, k = k0 + kk;
    ra[l] = (m < p.M && k < p.K) ? p.a.v[abase + (TRANS_A ? k * p.lda + m : m * p.lda + k)] : 0.0;
  }
  [[unroll]] for (uint l = 0; l < LB; ++l) {
    uint nn, kk;
    B_COORDS(l * LOCAL_SIZE + tid, nn, kk);
    const uint n = n0 + nn, k = k0 + kk;
    rb[l] = (n < p.N && k < p.K) ? p.b.v[bbase + (TRANS_B ? n * p.ldb + k : k * p.ldb + n)] : 0.0;
  }

  for (; k0 < p.K; k0 += BK) {
    barrier();  // everyone is done reading the previous slice
    [[unroll]] for (uint l = 0; l < LA; ++l) {
      uint mm, kk;
      A_COORDS(l * LOCAL_SIZE + tid, mm, kk);
      As[kk * SA + mm] = ra[l];
    }
    [[unroll]] for (uint l = 0; l < LB; ++l) {
      uint nn, kk;
      B_COORDS(l * LOCAL_SIZE + tid, nn, kk);
      Bs[kk * SB + nn] = rb[l];
    }
    barrier();

    const uint k1 = k0 + BK;
    if (k1 < p.K) {
      [[unroll]] for (uint l = 0; l < LA; ++l) {
        uint mm, kk;
        A_COORDS(l * LOCAL_SIZE + tid, mm, kk);
        const uint m = m0 + mm, k = k1 + kk;
        ra[l] = (m < p.M && k < p.K) ? p.a.v[abase + (TRANS_A ? k * p.lda + m : m * p.lda + k)] : 0.0;
      }
      [[unroll]] for (uint l = 0; l < LB; ++l) {
        uint nn, kk;
        B_COORDS(l * LOCAL_SIZE + tid, nn, kk);
        const uint n = n0 + nn, k = k1 + kk;
        rb[l] = (n < p.N && k < p.K) ? p.b.v[bbase + (TRANS_B ? n * p.ldb + k : k * p.ldb + n)] : 0.0;
      }
    }

    [[unroll]] for (uint kk = 0; kk < BK; ++kk) {
      float av[TM], bv[TN];
      [[unroll]] for (uint i = 0; i < TM; ++i) av[i] = As[kk * SA + ty + i * TY];
      [[unroll]] for (uint j = 0; j < TN; ++j) bv[j] = Bs[kk * SB + tx + j * TX];
      [[unroll]] for (uint i = 0; i < TM; ++i)
        [[unroll]] for (uint j = 0; j < TN; ++j) acc[i][j] += av[i] * bv[j];
    }
  }

  [[unroll]] for (uint i = 0; i < TM; ++i) {
    const uint m = m0 + ty + i * TY;
    if (m >= p.M) continue;
    [[unroll]] for (uint j = 0; j < TN; ++j) {
      const uint n = n0 + tx + j * TX;
      if (n < p.N) store_output(z, m, n, acc[i][j]);
    }
  }
}
