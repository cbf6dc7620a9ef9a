// Logit soft-capping, y = cap * tanh(x / cap) (Gemma 2's final logits), and its backward
// dx = dy * (1 - tanh^2(x / cap)). tanh is evaluated through exp so every driver agrees closely.
//!novariant_base
//!variant fwd -DFORWARD=1
//!variant bwd -DFORWARD=0
#version 460
#include "common.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

layout(push_constant, std430) uniform Push {
  F32Buf x;
  F32Buf dy;   // backward only
  F32Buf out_;
  uint n;
  float cap;
} p;

float stable_tanh(float v) {
  // tanh(v) = sign(v) * (1 - e) / (1 + e) with e = exp(-2|v|): no overflow for large |v|.
  const float e = exp(-2.0 * abs(v));
  const float t = (1.0 - e) / (1.0 + e);
  return v < 0.0 ? -t : t;
}

void main() {
  const uint i = flat_invocation(LOCAL_SIZE);
  if (i >= p.n) return;
  const float t = stable_tanh(p.x.v[i] / p.cap);
#if FORWARD
  p.out_.v[i] = p.cap * t;
#else
  p.out_.v[i] = p.dy.v[i] * (1.0 - t * t);
#endif
}
