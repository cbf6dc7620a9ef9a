// Tiled fp32 GEMM: each workgroup of 16x16 threads computes a BM x BN tile of C (BM = 16*TM,
// BN = 16*TN), staging BK-deep slices of opA and opB in shared memory; each thread accumulates a
// TM x TN register micro-tile. Every output is one thread's sum over k in increasing order, so
// results are deterministic. Grid: x = N tiles, y = M tiles, z = batch entries.
//
// A thread's micro-tile is made of 4x4 blocks strided by 64 (rows 64*g + 4*ty + r, columns
// 64*h + 4*tx + c), so each k step reads whole vec4s from shared memory: for a 32-wide warp the
// A reads are two broadcast addresses and the B reads 16 consecutive vec4s, free of bank
// conflicts. Global loads pick the thread order that walks each operand's contiguous dimension,
// so they coalesce for every transpose combination; the next slice is fetched into registers
// while the current one is multiplied. With ROUND_F16 every operand element is rounded to f16 as
// it is loaded (mixed precision on devices without cooperative matrices; see f16_round.glsl).
//!precise
//!variant f16b -DB_F16=1
#version 460
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "precise_math.glsl"
#include "f16_round.glsl"
#define LOCAL_SIZE 256
#define TX 16  // threads along N
#define TY 16  // threads along M
layout(local_size_x = LOCAL_SIZE) in;

layout(constant_id = 0) const uint TM = 4;   // micro-tile rows per thread, a multiple of 4
layout(constant_id = 1) const uint TN = 4;   // micro-tile columns per thread, a multiple of 4
layout(constant_id = 2) const uint BK = 16;  // k-depth of a slice; BM*BK and BN*BK multiples of 256
layout(constant_id = 3) const bool TRANS_A = false;
layout(constant_id = 4) const bool TRANS_B = false;
layout(constant_id = 5) const bool ROUND_F16 = false;  // round each operand element to f16

const uint BM = TY * TM;
const uint BN = TX * TN;
const uint GM = TM / 4;  // 4x4 blocks per thread along M and N
const uint GN = TN / 4;
// Shared slices are k-major. The row pitch stays a multiple of 4 floats (vec4 reads) and is 4
// mod 32 words, which spreads the transposing stores (rows of A without TRANS_A, rows of B with
// TRANS_B) over distinct banks.
const uint SA = BM + 4;
const uint SB = BN + 4;
const uint LA = BM * BK / LOCAL_SIZE;  // elements of A each thread loads per slice
const uint LB = BN * BK / LOCAL_SIZE;

shared vec4 As[BK * SA / 4];
shared vec4 Bs[BK * SB / 4];

#include "matmul_push.glsl"

// Slice element e of A is (mm, kk), of B (kk, nn); consecutive threads take consecutive
// addresses of the operand in global memory.
void a_coords(uint e, out uint mm, out uint kk) {
  if (TRANS_A) {
    mm = e % BM;
    kk = e / BM;
  } else {
    kk = e % BK;
    mm = e / BK;
  }
}
void b_coords(uint e, out uint kk, out uint nn) {
  if (TRANS_B) {
    kk = e % BK;
    nn = e / BK;
  } else {
    nn = e % BN;
    kk = e / BN;
  }
}

// Out-of-range elements load as zero, so the k tail adds exact zeros and needs no branch.
float load_a(uint base, uint m, uint k) {
  if (m >= p.M || k >= p.K) return 0.0;
  const float v = p.a.v[base + (TRANS_A ? k * p.lda + m : m * p.lda + k)];
  return ROUND_F16 ? round_to_f16(v) : v;
}
float load_b(uint base, uint k, uint n) {
  if (n >= p.N || k >= p.K) return 0.0;
#if defined(B_F16)
  // The f16b variant: B holds halves (a weight stored in f16), widened exactly to fp32 here; it
  // needs no ROUND_F16, as an f16 value rounds to itself.
  return unpackHalf2x16(uint(U16Buf(uint64_t(p.b)).v[base + (TRANS_B ? n * p.ldb + k : k * p.ldb + n)])).x;
#else
  const float v = p.b.v[base + (TRANS_B ? n * p.ldb + k : k * p.ldb + n)];
  return ROUND_F16 ? round_to_f16(v) : v;
#endif
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint tx = tid % TX, ty = tid / TX;
  const uint z = gl_WorkGroupID.z;
  const uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN;
  const uint abase = z * p.sa, bbase = z * p.sb;

  float ra[LA], rb[LB];
  VACC4 acc[TM][GN];  // acc[row][h].c is column 64*h + 4*tx + c
  [[unroll]] for (uint i = 0; i < TM; ++i)
    [[unroll]] for (uint h = 0; h < GN; ++h) acc[i][h] = VACC4(0.0);

  [[unroll]] for (uint l = 0; l < LA; ++l) {
    uint mm, kk;
    a_coords(l * LOCAL_SIZE + tid, mm, kk);
    ra[l] = load_a(abase, m0 + mm, kk);
  }
  [[unroll]] for (uint l = 0; l < LB; ++l) {
    uint kk, nn;
    b_coords(l * LOCAL_SIZE + tid, kk, nn);
    rb[l] = load_b(bbase, kk, n0 + nn);
  }

  for (uint k0 = 0; k0 < p.K; k0 += BK) {
    barrier();  // everyone is done reading the previous slice
    [[unroll]] for (uint l = 0; l < LA; ++l) {
      uint mm, kk;
      a_coords(l * LOCAL_SIZE + tid, mm, kk);
      As[kk * (SA / 4) + mm / 4][mm % 4] = ra[l];
    }
    [[unroll]] for (uint l = 0; l < LB; ++l) {
      uint kk, nn;
      b_coords(l * LOCAL_SIZE + tid, kk, nn);
      Bs[kk * (SB / 4) + nn / 4][nn % 4] = rb[l];
    }
    barrier();

    const uint k1 = k0 + BK;
    if (k1 < p.K) {
      [[unroll]] for (uint l = 0; l < LA; ++l) {
        uint mm, kk;
        a_coords(l * LOCAL_SIZE + tid, mm, kk);
        ra[l] = load_a(abase, m0 + mm, k1 + kk);
      }
      [[unroll]] for (uint l = 0; l < LB; ++l) {
        uint kk, nn;
        b_coords(l * LOCAL_SIZE + tid, kk, nn);
        rb[l] = load_b(bbase, k1 + kk, n0 + nn);
      }
    }

    [[unroll]] for (uint kk = 0; kk < BK; ++kk) {
      vec4 av[GM], bv[GN];
      [[unroll]] for (uint g = 0; g < GM; ++g) av[g] = As[kk * (SA / 4) + g * 16 + ty];
      [[unroll]] for (uint h = 0; h < GN; ++h) bv[h] = Bs[kk * (SB / 4) + h * 16 + tx];
      [[unroll]] for (uint g = 0; g < GM; ++g)
        [[unroll]] for (uint r = 0; r < 4; ++r)
          [[unroll]] for (uint h = 0; h < GN; ++h) acc[g * 4 + r][h] += VACC4(av[g][r]) * VACC4(bv[h]);
    }
  }

  [[unroll]] for (uint g = 0; g < GM; ++g)
    [[unroll]] for (uint r = 0; r < 4; ++r) {
      const uint m = m0 + g * 64 + ty * 4 + r;
      if (m >= p.M) continue;
      [[unroll]] for (uint h = 0; h < GN; ++h)
        [[unroll]] for (uint c = 0; c < 4; ++c) {
          const uint n = n0 + h * 64 + tx * 4 + c;
          if (n < p.N) store_output(z, m, n, acc[g * 4 + r][h][c]);
        }
    }
}
