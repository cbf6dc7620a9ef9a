// Normalization over the last dimension, forward, statistics in fp32.
//   rms:   y = (x * rsqrt(mean(x^2) + eps)) * w'      w' = w, or 1 + w (Gemma), or 1 (no weight)
//   layer: y = ((x - mean) * rsqrt(var + eps)) * w + b  (biased variance, as torch.nn.LayerNorm)
// The products are taken in transformers' order (normalize first, then scale). Optionally saves
// the per-row mean and rstd for the backward pass. Rows are laid out as in norm_rows.glsl.
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
#define HAS_BIAS 4u
#define SAVE_STATS 8u
#define HOLD 8u  // elements per thread an RMSNorm row keeps in registers

layout(push_constant, std430) uniform Push {
  F32Buf x;     // [rows, H]
  F32Buf w;     // [H] (when HAS_WEIGHT)
  F32Buf b;     // [H] (when HAS_BIAS)
  F32Buf y;     // [rows, H]
  F32Buf mean;  // [rows] (when SAVE_STATS, layer only)
  F32Buf rstd;  // [rows] (when SAVE_STATS)
  uint rows;
  uint H;
  uint tpr_log2;
  float eps;
  uint flags;
} p;

void main() {
  const uint tpr = 1u << p.tpr_log2;
  const uint lane = gl_LocalInvocationID.x & (tpr - 1u);
  const uint row =
      flat_group() * (LOCAL_SIZE >> p.tpr_log2) + (gl_LocalInvocationID.x >> p.tpr_log2);
  // Threads past the last row still take part in the reductions (barriers) but touch nothing.
  const bool in_range = row < p.rows;
  const uint base = in_range ? row * p.H : 0u;
  const uint n = in_range ? p.H : 0u;

#if NORM_LAYER
  VACC s = VACC(0.0);
  for (uint i = lane; i < n; i += tpr) s += VACC(p.x.v[base + i]);
  const VACC mu = row_sum(s, lane, tpr) / VACC(p.H);
  // Two passes (mean, then squared deviations) rather than E[x^2] - mean^2, which cancels.
  VACC q = VACC(0.0);
  for (uint i = lane; i < n; i += tpr) {
    const VACC d = VACC(p.x.v[base + i]) - mu;
    q += d * d;
  }
  const VACC var = row_sum(q, lane, tpr) / VACC(p.H);
#else
  // RMSNorm: rows of up to HOLD elements per thread (every row up to 8 x 256, which includes the
  // models' hidden sizes) are read once into registers and normalized from there; longer rows
  // are read again. The same elements in the same order either way, so the same bits (decode's
  // fused norm, ops/decode.cpp, relies on that order). Reading every row twice, the kernel ran at
  // 2.0 TB/s on an H100 at hidden size 2048.
  const VACC mu = VACC(0.0);
  const bool held = n <= HOLD * tpr;
  float xh[HOLD];
  [[unroll]] for (uint k = 0; k < HOLD; ++k) {
    const uint i = lane + k * tpr;
    xh[k] = held && i < n ? p.x.v[base + i] : 0.0;
  }
  VACC q = VACC(0.0);
  if (held) {
    [[unroll]] for (uint k = 0; k < HOLD; ++k)
      if (lane + k * tpr < n) q += VACC(xh[k]) * VACC(xh[k]);
  } else {
    for (uint i = lane; i < n; i += tpr) {
      const VACC v = VACC(p.x.v[base + i]);
      q += v * v;
    }
  }
  const VACC var = row_sum(q, lane, tpr) / VACC(p.H);
#endif
#if VKF_PRECISE
  const double r = 1.0LF / sqrt(var + double(p.eps));
#else
  const float r = inversesqrt(var + p.eps);
#endif
  if (!in_range) return;

  const bool has_w = (p.flags & HAS_WEIGHT) != 0u;
  const bool one_plus = (p.flags & ONE_PLUS) != 0u;
  const bool has_b = (p.flags & HAS_BIAS) != 0u;
#if !NORM_LAYER
  if (held) {
    [[unroll]] for (uint k = 0; k < HOLD; ++k) {
      const uint i = lane + k * tpr;
      if (i >= n) break;
      VACC v = VACC(xh[k]) * r;
      if (has_w) v *= one_plus ? VACC(1.0) + VACC(p.w.v[i]) : VACC(p.w.v[i]);
      p.y.v[base + i] = float(v);
    }
  } else
#endif
  for (uint i = lane; i < n; i += tpr) {
    VACC v = (VACC(p.x.v[base + i]) - mu) * r;
    if (has_w) v *= one_plus ? VACC(1.0) + VACC(p.w.v[i]) : VACC(p.w.v[i]);
    if (has_b) v += VACC(p.b.v[i]);
    p.y.v[base + i] = float(v);
  }
  if (lane == 0u && (p.flags & SAVE_STATS) != 0u) {
#if NORM_LAYER
    p.mean.v[row] = float(mu);
#endif
    p.rstd.v[row] = float(r);
  }
}
