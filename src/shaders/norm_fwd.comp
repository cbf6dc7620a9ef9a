// Normalization over the last dimension, forward, statistics in fp32.
//   rms:   y = (x * rsqrt(mean(x^2) + eps)) * w'      w' = w, or 1 + w (Gemma), or 1 (no weight)
//   layer: y = ((x - mean) * rsqrt(var + eps)) * w + b  (biased variance, as torch.nn.LayerNorm)
// The products are taken in transformers' order (normalize first, then scale). Optionally saves
// the per-row mean and rstd for the backward pass. Rows are laid out as in norm_rows.glsl.
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
#define HAS_BIAS 4u
#define SAVE_STATS 8u

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
  float s = 0.0;
  for (uint i = lane; i < n; i += tpr) s += p.x.v[base + i];
  const float mu = row_sum(s, lane, tpr) / float(p.H);
  // Two passes (mean, then squared deviations) rather than E[x^2] - mean^2, which cancels.
  float q = 0.0;
  for (uint i = lane; i < n; i += tpr) {
    const float d = p.x.v[base + i] - mu;
    q += d * d;
  }
  const float var = row_sum(q, lane, tpr) / float(p.H);
#else
  const float mu = 0.0;
  float q = 0.0;
  for (uint i = lane; i < n; i += tpr) {
    const float v = p.x.v[base + i];
    q += v * v;
  }
  const float var = row_sum(q, lane, tpr) / float(p.H);
#endif
  const float r = inversesqrt(var + p.eps);
  if (!in_range) return;

  const bool has_w = (p.flags & HAS_WEIGHT) != 0u;
  const bool one_plus = (p.flags & ONE_PLUS) != 0u;
  const bool has_b = (p.flags & HAS_BIAS) != 0u;
  for (uint i = lane; i < n; i += tpr) {
    float v = (p.x.v[base + i] - mu) * r;
    if (has_w) v *= one_plus ? 1.0 + p.w.v[i] : p.w.v[i];
    if (has_b) v += p.b.v[i];
    p.y.v[base + i] = v;
  }
  if (lane == 0u && (p.flags & SAVE_STATS) != 0u) {
#if NORM_LAYER
    p.mean.v[row] = mu;
#endif
    p.rstd.v[row] = r;
  }
}
