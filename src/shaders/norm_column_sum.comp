// Normalization weight/bias gradients, second stage: out[j] (=, or += with ACCUMULATE) the sum
// of the [blocks, H] partials of norm_param_grad over blocks, in block order (deterministic).
// The precise build sums (and accumulates) in double, rounding once.
//!precise
#version 460
#include "common.glsl"
#include "precise_math.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

layout(push_constant, std430) uniform Push {
  F32Buf part;  // [blocks, H]
  F32Buf out_;  // [H]
  uint blocks;
  uint H;
  uint accumulate;
} p;

void main() {
  const uint j = flat_invocation(LOCAL_SIZE);
  if (j >= p.H) return;
  VACC s = VACC(0.0);
  for (uint b = 0; b < p.blocks; ++b) s += VACC(p.part.v[b * p.H + j]);
  p.out_.v[j] = float(p.accumulate != 0u ? VACC(p.out_.v[j]) + s : s);
}
