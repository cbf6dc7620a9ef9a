// x[i] *= s[0] in place, s a rank-0 tensor in device memory: the fused LM-head cross-entropy
// (ops/linear_cross_entropy.cpp) makes its input gradients for an incoming gradient of 1 during
// the forward, and its backward scales them by the real one without a host round trip.
#version 460
#include "common.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

layout(push_constant, std430) uniform Push {
  F32Buf s;  // []
  F32Buf x;  // [n], scaled in place
  uint n;
} p;

void main() {
  const uint i = flat_invocation(LOCAL_SIZE);
  if (i >= p.n) return;
  p.x.v[i] = p.x.v[i] * p.s.v[0];
}
