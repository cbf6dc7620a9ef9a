// Normalization weight/bias gradients, first stage: per block of rows, column sums of
//   dw[j] = sum_rows dy[r, j] * xhat[r, j]      db[j] = sum_rows dy[r, j]
// (xhat = x * rstd for rms, (x - mean) * rstd for layer; the same dw serves w and 1 + w).
// Workgroup (x = column tile, y = row block): TW = 256 / RL consecutive columns by RL row lanes;
// row lane l walks rows l, l + RL, ... of the block in order, then the RL lane sums meet in a
// fixed-shape shared-memory tree. Partials go to [blocks, H] scratch for norm_column_sum, or
// straight to the gradient when there is one block. No atomics: the result depends on sizes only.
//!novariant_base
//!variant rms -DNORM_RMS=1
//!variant layer -DNORM_LAYER=1
//!precise
#version 460
#include "common.glsl"
#include "precise_math.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

#define WANT_W 1u
#define WANT_B 2u
#define ACCUMULATE 4u

layout(push_constant, std430) uniform Push {
  F32Buf x;     // [rows, H]
  F32Buf dy;    // [rows, H]
  F32Buf mean;  // [rows] (layer only)
  F32Buf rstd;  // [rows]
  F32Buf dw;    // [blocks, H]
  F32Buf db;    // [blocks, H]
  uint rows;
  uint H;
  uint rows_per_block;
  uint tw_log2;  // log2 of the columns per workgroup; row lanes RL = 256 >> tw_log2
  uint flags;
} p;

shared VACC2 red[LOCAL_SIZE];

void main() {
  const uint tw = 1u << p.tw_log2;
  const uint rl = LOCAL_SIZE >> p.tw_log2;
  const uint t = gl_LocalInvocationID.x;
  const uint col_lane = t & (tw - 1u);
  const uint row_lane = t >> p.tw_log2;
  const uint col = gl_WorkGroupID.x * tw + col_lane;
  const uint block = gl_WorkGroupID.y;
  const uint r0 = block * p.rows_per_block;
  const uint r1 = min(r0 + p.rows_per_block, p.rows);

  VACC2 acc = VACC2(0.0);
  if (col < p.H) {
    for (uint r = r0 + row_lane; r < r1; r += rl) {
      const VACC g = VACC(p.dy.v[r * p.H + col]);
#if NORM_LAYER
      const VACC xhat = (VACC(p.x.v[r * p.H + col]) - VACC(p.mean.v[r])) * VACC(p.rstd.v[r]);
#else
      const VACC xhat = VACC(p.x.v[r * p.H + col]) * VACC(p.rstd.v[r]);
#endif
      acc += VACC2(g * xhat, g);
    }
  }
  red[t] = acc;
  barrier();
  for (uint s = rl >> 1; s > 0; s >>= 1) {
    if (row_lane < s) red[t] += red[t + s * tw];
    barrier();
  }
  if (row_lane != 0u || col >= p.H) return;
  const VACC2 total = red[t];
  const uint o = block * p.H + col;
  const bool accumulate = (p.flags & ACCUMULATE) != 0u;
  if ((p.flags & WANT_W) != 0u) p.dw.v[o] = float(accumulate ? VACC(p.dw.v[o]) + total.x : total.x);
  if ((p.flags & WANT_B) != 0u) p.db.v[o] = float(accumulate ? VACC(p.db.v[o]) + total.y : total.y);
}
