// Logit soft-capping, y = cap * tanh(x / cap) (Gemma 2's final logits), and its backward
// dx = dy * (1 - tanh^2(x / cap)), with tanh from precise_math.glsl.
//!novariant_base
//!variant fwd -DFORWARD=1
//!variant bwd -DFORWARD=0
//!precise
#version 460
#include "common.glsl"
#include "precise_math.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

layout(push_constant, std430) uniform Push {
  F32Buf x;
  F32Buf dy;   // backward only
  F32Buf out_;
  uint n;
  float cap;
} p;

void main() {
  const uint i = flat_invocation(LOCAL_SIZE);
  if (i >= p.n) return;
  const float t = vtanh(p.x.v[i] / p.cap);
#if FORWARD
  p.out_.v[i] = p.cap * t;
#else
  p.out_.v[i] = p.dy.v[i] * (1.0 - t * t);
#endif
}
