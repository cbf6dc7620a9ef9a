// Column sums of a row-strided f32 matrix, the bias gradient of linear(): for each column n,
//   dst[y*dst_rs + n] = sum over rows r of chunk y of src[r*ld + n]  (+ beta * dst[...]).
// Workgroup (x, y) owns 32 adjacent columns (coalesced row reads) and rows
// [y*rows_per_group, (y+1)*rows_per_group); its 8 row-slices each sum every 8th row in order and
// a fixed tree adds the slices, so results are deterministic. The host reduces long matrices in
// two passes (partial sums per row chunk, then the sums of those) rather than using atomics.
// The precise build sums in double and rounds each output once.
//!precise
#version 460
#include "common.glsl"
#include "precise_math.glsl"
#define LOCAL_SIZE 256
#define COLS 32
#define SLICES (LOCAL_SIZE / COLS)
layout(local_size_x = LOCAL_SIZE) in;

layout(push_constant, std430) uniform Push {
  F32Buf src;
  F32Buf dst;
  uint R, N;
  uint ld;
  uint rows_per_group;
  uint dst_rs;
  float beta;
} p;

shared VACC red[LOCAL_SIZE];

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint col = tid % COLS, slice = tid / COLS;
  const uint n = gl_WorkGroupID.x * COLS + col;
  const uint r0 = gl_WorkGroupID.y * p.rows_per_group;
  const uint r1 = min(p.R, r0 + p.rows_per_group);
  VACC s = VACC(0.0);
  if (n < p.N) {
    for (uint r = r0 + slice; r < r1; r += SLICES) s += VACC(p.src.v[r * p.ld + n]);
  }
  red[tid] = s;
  barrier();
  for (uint h = SLICES / 2; h > 0; h /= 2) {
    if (slice < h) red[tid] += red[tid + h * COLS];
    barrier();
  }
  if (slice == 0 && n < p.N) {
    const uint di = gl_WorkGroupID.y * p.dst_rs + n;
    VACC v = red[tid];
    if (p.beta != 0.0) v += VACC(p.beta) * VACC(p.dst.v[di]);
    p.dst.v[di] = float(v);
  }
}
