// Skinny GEMM (M <= 8 rows of fp32 activations) against a weight stored in f16 with its rows
// contiguous (TRANS_B: B is [N, K], the Hugging Face layout, converted to half on load). Decode's
// projections are this product, and it is memory-bound: every weight byte is read once and the
// whole cost is how many bytes are in flight. Each workgroup owns COLS weight rows (output
// columns); KS = 32 consecutive threads walk one row's contiguous k with 16-byte loads of 8 halves
// (VEC8), UNROLL independent loads issued before any is used (a row of K = 2048 is one round).
// opA is small and read by every workgroup, so it is read straight from global memory (it stays
// in cache): no shared staging and no barrier in the main loop. Accumulators, epilogue and output
// are fp32 (fp64 in the precise build). Each thread sums its k in increasing order and a row's KS
// partial sums meet in a fixed tree, so results are deterministic. Grid: x = blocks of COLS weight rows, z = batch entries.
// Push constants and epilogue are the fp32 GEMMs' (matmul_push.glsl); p.b addresses halves and
// its strides (ldb, sb) count halves.
//!precise
#version 460
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "precise_math.glsl"
#define LOCAL_SIZE 256
#define KS 32                     // threads sharing one weight row
#define COLS (LOCAL_SIZE / KS)    // weight rows per workgroup
#define MMAX 8                    // largest MROWS
#define UNROLL 8                  // 16-byte weight loads in flight per thread
layout(local_size_x = LOCAL_SIZE) in;

layout(constant_id = 0) const uint MROWS = 1;  // M, 1..MMAX
layout(constant_id = 1) const bool TRANS_A = false;
// 16-byte loads of the weight (8 halves) and of opA (two vec4): the host sets it when K % 8 == 0,
// opA is row-major and every row start of both operands is 16-byte aligned.
layout(constant_id = 2) const bool VEC8 = false;

layout(buffer_reference, std430, buffer_reference_align = 16) buffer UVec4Buf { uvec4 v[]; };

shared VACC red[MMAX * LOCAL_SIZE];

#include "matmul_push.glsl"

VACC acc[MMAX];

float load_a(uint abase, uint m, uint k) {
  return p.a.v[abase + (TRANS_A ? k * p.lda + m : m * p.lda + k)];
}

// Adds the products of k = 8g..8g+7: w holds the weight row's 8 halves there.
void accumulate8(uvec4 w, uint abase, uint g) {
  const vec2 w0 = unpackHalf2x16(w.x), w1 = unpackHalf2x16(w.y);
  const vec2 w2 = unpackHalf2x16(w.z), w3 = unpackHalf2x16(w.w);
  Vec4Buf a4 = Vec4Buf(uint64_t(p.a));
  [[unroll]] for (uint m = 0; m < MROWS; ++m) {
    const uint ai = (abase + m * p.lda) / 4 + 2 * g;
    const vec4 a0 = a4.v[ai], a1 = a4.v[ai + 1];
    VACC s = acc[m];
    s += VACC(a0.x) * VACC(w0.x);
    s += VACC(a0.y) * VACC(w0.y);
    s += VACC(a0.z) * VACC(w1.x);
    s += VACC(a0.w) * VACC(w1.y);
    s += VACC(a1.x) * VACC(w2.x);
    s += VACC(a1.y) * VACC(w2.y);
    s += VACC(a1.z) * VACC(w3.x);
    s += VACC(a1.w) * VACC(w3.y);
    acc[m] = s;
  }
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint lane = tid % KS, col = tid / KS;
  const uint z = gl_WorkGroupID.z;
  const uint n = gl_WorkGroupID.x * COLS + col;
  const uint abase = z * p.sa, bbase = z * p.sb;
  [[unroll]] for (uint m = 0; m < MMAX; ++m) acc[m] = 0.0;

  if (n < p.N) {
    if (VEC8) {
      UVec4Buf w = UVec4Buf(uint64_t(p.b));
      const uint row = (bbase + n * p.ldb) / 8;  // in 8-half groups
      const uint groups = p.K / 8;
      // UNROLL loads issued together (the last round's past the row are skipped, not issued).
      for (uint g = lane; g < groups; g += UNROLL * KS) {
        uvec4 wv[UNROLL];
        [[unroll]] for (uint u = 0; u < UNROLL; ++u)
          wv[u] = g + u * KS < groups ? w.v[row + g + u * KS] : uvec4(0);
        [[unroll]] for (uint u = 0; u < UNROLL; ++u)
          if (g + u * KS < groups) accumulate8(wv[u], abase, g + u * KS);
      }
    } else {
      U16Buf w = U16Buf(uint64_t(p.b));
      const uint row = bbase + n * p.ldb;
      for (uint k = lane; k < p.K; k += KS) {
        const float wk = unpackHalf2x16(uint(w.v[row + k])).x;
        [[unroll]] for (uint m = 0; m < MROWS; ++m) acc[m] += VACC(load_a(abase, m, k)) * VACC(wk);
      }
    }
  }

  [[unroll]] for (uint m = 0; m < MROWS; ++m) red[m * LOCAL_SIZE + tid] = acc[m];
  barrier();
  for (uint s = KS / 2; s > 0; s /= 2) {
    if (lane < s) {
      [[unroll]] for (uint m = 0; m < MROWS; ++m)
        red[m * LOCAL_SIZE + tid] += red[m * LOCAL_SIZE + tid + s];
    }
    barrier();
  }
  if (lane == 0 && n < p.N) {
    [[unroll]] for (uint m = 0; m < MROWS; ++m) store_output(z, m, n, red[m * LOCAL_SIZE + tid]);
  }
}
