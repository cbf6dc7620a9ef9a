// Normalization weight/bias gradients, second stage: out[j] (=, or += with ACCUMULATE) the sum
// of the [blocks, H] partials of norm_param_grad over blocks, in block order (deterministic).
#version 460
#include "common.glsl"
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
  float s = 0.0;
  for (uint b = 0; b < p.blocks; ++b) s += p.part.v[b * p.H + j];
  p.out_.v[j] = p.accumulate != 0u ? p.out_.v[j] + s : s;
}
