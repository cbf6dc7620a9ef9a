// Embedding backward, step 5: grad[row, c] (+)= sum of dy[n, c] over the tokens n of that id, in
// increasing n (the bucket order), so the result is bitwise reproducible. One workgroup per
// (row, block of 256 columns); each thread owns 4 columns strided by the workgroup size so that
// loads of a dy row are contiguous across threads. Rows without tokens are written 0, or left
// untouched when accumulating. The precise build sums (and accumulates) in double, rounding once.
//!precise
#version 460
#include "common.glsl"
#include "precise_math.glsl"
#define LOCAL_SIZE 64
#define COLS_PER_THREAD 4
layout(local_size_x = LOCAL_SIZE) in;

layout(push_constant, std430) uniform Push {
  F32Buf dy;       // [N, H]
  U32Buf offsets;  // [V + 1]
  U32Buf sorted;   // [N], positions grouped by id, increasing within a group
  F32Buf grad;     // [V, H]
  uint vocab;
  uint hidden;
  uint col_blocks;  // ceil(H / (LOCAL_SIZE * COLS_PER_THREAD))
  uint accumulate;
} p;

void main() {
  uint g = flat_group();
  uint row = g / p.col_blocks;
  if (row >= p.vocab) return;
  uint block = g - row * p.col_blocks;
  uint lo = p.offsets.v[row];
  uint hi = p.offsets.v[row + 1u];
  if (lo == hi && p.accumulate != 0u) return;
  uint c0 = block * (LOCAL_SIZE * COLS_PER_THREAD) + gl_LocalInvocationID.x;
  VACC acc[COLS_PER_THREAD];
  for (uint k = 0u; k < COLS_PER_THREAD; ++k) acc[k] = VACC(0.0);
  for (uint t = lo; t < hi; ++t) {
    uint base = p.sorted.v[t] * p.hidden;
    for (uint k = 0u; k < COLS_PER_THREAD; ++k) {
      uint c = c0 + k * LOCAL_SIZE;
      if (c < p.hidden) acc[k] += VACC(p.dy.v[base + c]);
    }
  }
  uint out_base = row * p.hidden;
  for (uint k = 0u; k < COLS_PER_THREAD; ++k) {
    uint c = c0 + k * LOCAL_SIZE;
    if (c >= p.hidden) continue;
    if (p.accumulate != 0u) {
      p.grad.v[out_base + c] = float(VACC(p.grad.v[out_base + c]) + acc[k]);
    } else {
      p.grad.v[out_base + c] = float(acc[k]);
    }
  }
}
