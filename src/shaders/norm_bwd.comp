// Normalization over the last dimension, gradient w.r.t. x, from the saved per-row mean/rstd.
// With gw = dy * w' (w' = w, 1 + w, or 1) and xhat the normalized input:
//   rms:   dx = r * (gw - x * r^2 * mean(gw * x))
//   layer: dx = r * (gw - mean(gw) - xhat * mean(gw * xhat))
// Writes dx, or adds to it (ACCUMULATE) so autodiff can hand the gradient buffer itself.
//!novariant_base
//!variant rms -DNORM_RMS=1
//!variant layer -DNORM_LAYER=1
#version 460
#include "common.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;
#include "norm_rows.glsl"

#define HAS_WEIGHT 1u
#define ONE_PLUS 2u
#define ACCUMULATE 4u

layout(push_constant, std430) uniform Push {
  F32Buf x;     // [rows, H]
  F32Buf w;     // [H] (when HAS_WEIGHT)
  F32Buf dy;    // [rows, H]
  F32Buf mean;  // [rows] (layer only)
  F32Buf rstd;  // [rows]
  F32Buf dx;    // [rows, H]
  uint rows;
  uint H;
  uint tpr_log2;
  uint flags;
} p;

float scaled_grad(uint base, uint i) {
  float g = p.dy.v[base + i];
  if ((p.flags & HAS_WEIGHT) != 0u) g *= (p.flags & ONE_PLUS) != 0u ? 1.0 + p.w.v[i] : p.w.v[i];
  return g;
}

void main() {
  const uint tpr = 1u << p.tpr_log2;
  const uint lane = gl_LocalInvocationID.x & (tpr - 1u);
  const uint row =
      flat_group() * (LOCAL_SIZE >> p.tpr_log2) + (gl_LocalInvocationID.x >> p.tpr_log2);
  const bool in_range = row < p.rows;
  const uint base = in_range ? row * p.H : 0u;
  const uint n = in_range ? p.H : 0u;
  const float r = in_range ? p.rstd.v[row] : 0.0;
  const float inv_h = 1.0 / float(p.H);
  const bool acc = (p.flags & ACCUMULATE) != 0u;

#if NORM_LAYER
  const float mu = in_range ? p.mean.v[row] : 0.0;
  vec2 s = vec2(0.0);
  for (uint i = lane; i < n; i += tpr) {
    const float gw = scaled_grad(base, i);
    s += vec2(gw, gw * ((p.x.v[base + i] - mu) * r));
  }
  const vec2 tot = row_sum2(s, lane, tpr) * inv_h;
  if (!in_range) return;
  for (uint i = lane; i < n; i += tpr) {
    const float xhat = (p.x.v[base + i] - mu) * r;
    const float v = r * (scaled_grad(base, i) - tot.x - xhat * tot.y);
    p.dx.v[base + i] = acc ? p.dx.v[base + i] + v : v;
  }
#else
  float s = 0.0;
  for (uint i = lane; i < n; i += tpr) s += scaled_grad(base, i) * p.x.v[base + i];
  const float c = row_sum(s, lane, tpr) * inv_h * r * r;
  if (!in_range) return;
  for (uint i = lane; i < n; i += tpr) {
    const float v = r * (scaled_grad(base, i) - p.x.v[base + i] * c);
    p.dx.v[base + i] = acc ? p.dx.v[base + i] + v : v;
  }
#endif
}
