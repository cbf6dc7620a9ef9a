// Normalization over the last dimension, gradient w.r.t. x, from the saved per-row mean/rstd.
// With gw = dy * w' (w' = w, 1 + w, or 1) and xhat the normalized input:
//   rms:   dx = r * (gw - x * r^2 * mean(gw * x))
//   layer: dx = r * (gw - mean(gw) - xhat * mean(gw * xhat))
// Writes dx, or adds to it (ACCUMULATE) so autodiff can hand the gradient buffer itself.
//!novariant_base
//!variant rms -DNORM_RMS=1
//!variant layer -DNORM_LAYER=1
//!precise
#version 460
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "precise_math.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;
#include "norm_rows.glsl"

#define HAS_WEIGHT 1u
#define ONE_PLUS 2u
#define ACCUMULATE 4u
#define HOLD 8u  // elements per thread an RMSNorm row keeps in registers

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

// dy * w' for element i of a row whose dy value is `dy`.
VACC weighted(float dy, uint i) {
  VACC g = VACC(dy);
  if ((p.flags & HAS_WEIGHT) != 0u)
    g *= (p.flags & ONE_PLUS) != 0u ? VACC(1.0) + VACC(p.w.v[i]) : VACC(p.w.v[i]);
  return g;
}

VACC scaled_grad(uint base, uint i) {
  return weighted(p.dy.v[base + i], i);
}

void main() {
  const uint tpr = 1u << p.tpr_log2;
  const uint lane = gl_LocalInvocationID.x & (tpr - 1u);
  const uint row =
      flat_group() * (LOCAL_SIZE >> p.tpr_log2) + (gl_LocalInvocationID.x >> p.tpr_log2);
  const bool in_range = row < p.rows;
  const uint base = in_range ? row * p.H : 0u;
  const uint n = in_range ? p.H : 0u;
  const VACC r = VACC(in_range ? p.rstd.v[row] : 0.0);
  const VACC inv_h = VACC(1.0) / VACC(p.H);
  const bool acc = (p.flags & ACCUMULATE) != 0u;

#if NORM_LAYER
  const VACC mu = VACC(in_range ? p.mean.v[row] : 0.0);
  VACC2 s = VACC2(0.0);
  for (uint i = lane; i < n; i += tpr) {
    const VACC gw = scaled_grad(base, i);
    s += VACC2(gw, gw * ((VACC(p.x.v[base + i]) - mu) * r));
  }
  const VACC2 tot = row_sum2(s, lane, tpr) * inv_h;
  if (!in_range) return;
  for (uint i = lane; i < n; i += tpr) {
    const VACC xhat = (VACC(p.x.v[base + i]) - mu) * r;
    const VACC v = r * (scaled_grad(base, i) - tot.x - xhat * tot.y);
    p.dx.v[base + i] = float(acc ? VACC(p.dx.v[base + i]) + v : v);
  }
#else
  // Rows of up to HOLD elements per thread keep x and dy in registers between the two loops (as
  // norm_fwd.comp does): the same elements in the same order, so the same bits.
  const bool held = n <= HOLD * tpr;
  float xh[HOLD], dyh[HOLD];
  [[unroll]] for (uint k = 0; k < HOLD; ++k) {
    const uint i = lane + k * tpr;
    const bool ok = held && i < n;
    xh[k] = ok ? p.x.v[base + i] : 0.0;
    dyh[k] = ok ? p.dy.v[base + i] : 0.0;
  }
  VACC s = VACC(0.0);
  if (held) {
    [[unroll]] for (uint k = 0; k < HOLD; ++k) {
      const uint i = lane + k * tpr;
      if (i < n) s += weighted(dyh[k], i) * VACC(xh[k]);
    }
  } else {
    for (uint i = lane; i < n; i += tpr) s += scaled_grad(base, i) * VACC(p.x.v[base + i]);
  }
  const VACC c = row_sum(s, lane, tpr) * inv_h * r * r;
  if (!in_range) return;
  if (held) {
    [[unroll]] for (uint k = 0; k < HOLD; ++k) {
      const uint i = lane + k * tpr;
      if (i >= n) break;
      const VACC v = r * (weighted(dyh[k], i) - VACC(xh[k]) * c);
      p.dx.v[base + i] = float(acc ? VACC(p.dx.v[base + i]) + v : v);
    }
    return;
  }
  for (uint i = lane; i < n; i += tpr) {
    const VACC v = r * (scaled_grad(base, i) - VACC(p.x.v[base + i]) * c);
    p.dx.v[base + i] = float(acc ? VACC(p.dx.v[base + i]) + v : v);
  }
#endif
}
