// fp32 GEMM for skinny problems, M <= 8 (decode: a few token rows against a weight; the host maps
// N <= 8 here too by computing C^T = opB^T opA^T). Reading opB once is the whole cost, so each
// workgroup owns a block of columns and splits K across its threads: with TRANS_B (B stored
// [N, K], the Hugging Face weight layout) 32 consecutive threads walk one column's contiguous k,
// otherwise 32 consecutive threads take 32 adjacent columns at the same k, so loads coalesce
// either way. opA's rows are staged in shared memory a K-chunk at a time. Each thread sums its k
// in increasing order and the per-column partial sums are combined by a fixed tree, so results
// are deterministic. With ROUND_F16 every operand element is rounded to f16 as it is read (mixed
// precision; see f16_round.glsl). Grid: x = column blocks of COLS, z = batch entries.
//!precise
#version 460
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "precise_math.glsl"
#include "f16_round.glsl"
#define LOCAL_SIZE 256
#define MMAX 8    // largest MROWS
#define KC 256    // k-chunk of opA staged in shared memory
layout(local_size_x = LOCAL_SIZE) in;

layout(constant_id = 0) const uint MROWS = 1;  // M, 1..MMAX
layout(constant_id = 1) const bool TRANS_A = false;
layout(constant_id = 2) const bool TRANS_B = false;
// With TRANS_B only: each thread reads 4 consecutive k as one vec4. The host sets it when every
// such vec4 is 16-byte aligned and K is a multiple of 4.
layout(constant_id = 3) const bool VEC4_B = false;
layout(constant_id = 4) const bool ROUND_F16 = false;  // round each operand element to f16

float operand(float v) { return ROUND_F16 ? round_to_f16(v) : v; }
vec4 operand4(vec4 v) {
  return ROUND_F16 ? vec4(round_to_f16(v.x), round_to_f16(v.y), round_to_f16(v.z), round_to_f16(v.w))
                   : v;
}

const uint KS = TRANS_B ? 32u : 8u;  // threads sharing one column (k-slices)
const uint COLS = LOCAL_SIZE / KS;   // columns per workgroup

shared vec4 As[MMAX * KC / 4];  // As[m * KC/4 + kk/4][kk % 4] is opA(m, k0 + kk)
shared VACC red[MMAX * LOCAL_SIZE];

#include "matmul_push.glsl"

void main() {
  const uint tid = gl_LocalInvocationID.x;
  uint lane, col;
  if (TRANS_B) {
    lane = tid % KS;
    col = tid / KS;
  } else {
    col = tid % COLS;
    lane = tid / COLS;
  }
  const uint z = gl_WorkGroupID.z;
  const uint n = gl_WorkGroupID.x * COLS + col;
  const bool valid = n < p.N;
  const uint abase = z * p.sa, bbase = z * p.sb;

  Vec4Buf b4 = Vec4Buf(uint64_t(p.b));
  VACC acc[MMAX];
  [[unroll]] for (uint m = 0; m < MMAX; ++m) acc[m] = 0.0;

  for (uint k0 = 0; k0 < p.K; k0 += KC) {
    barrier();  // the previous chunk is no longer read
    for (uint e = tid; e < MROWS * KC; e += LOCAL_SIZE) {
      uint m, kk;
      if (TRANS_A) {
        m = e % MROWS;
        kk = e / MROWS;
      } else {
        kk = e % KC;
        m = e / KC;
      }
      const uint k = k0 + kk;
      As[m * (KC / 4) + kk / 4][kk % 4] =
          k < p.K ? operand(p.a.v[abase + (TRANS_A ? k * p.lda + m : m * p.lda + k)]) : 0.0;
    }
    barrier();
    const uint kend = min(KC, p.K - k0);
    if (valid && VEC4_B) {
      const uint row = (bbase + n * p.ldb + k0) / 4;
      for (uint q = lane; q < kend / 4; q += KS) {
        const vec4 bv = operand4(b4.v[row + q]);
        [[unroll]] for (uint m = 0; m < MROWS; ++m) {
          const vec4 av = As[m * (KC / 4) + q];
          acc[m] += VACC(av.x) * VACC(bv.x);
          acc[m] += VACC(av.y) * VACC(bv.y);
          acc[m] += VACC(av.z) * VACC(bv.z);
          acc[m] += VACC(av.w) * VACC(bv.w);
        }
      }
    } else if (valid) {
      for (uint kk = lane; kk < kend; kk += KS) {
        const uint k = k0 + kk;
        const float bv = operand(p.b.v[bbase + (TRANS_B ? n * p.ldb + k : k * p.ldb + n)]);
        [[unroll]] for (uint m = 0; m < MROWS; ++m)
          acc[m] += VACC(As[m * (KC / 4) + kk / 4][kk % 4]) * VACC(bv);
      }
    }
  }

  [[unroll]] for (uint m = 0; m < MROWS; ++m) red[m * LOCAL_SIZE + tid] = acc[m];
  barrier();
  // Lane s of a column lives at tid + s*STEP; halve the live lanes each round.
  const uint STEP = TRANS_B ? 1u : COLS;
  for (uint s = KS / 2; s > 0; s /= 2) {
    if (lane < s) {
      [[unroll]] for (uint m = 0; m < MROWS; ++m)
        red[m * LOCAL_SIZE + tid] += red[m * LOCAL_SIZE + tid + s * STEP];
    }
    barrier();
  }
  if (lane == 0 && valid) {
    [[unroll]] for (uint m = 0; m < MROWS; ++m) store_output(z, m, n, red[m * LOCAL_SIZE + tid]);
  }
}
