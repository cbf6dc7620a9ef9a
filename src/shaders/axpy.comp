// out[i] = a[i] + alpha * b[i] over contiguous f32 tensors (out may alias a for in-place).
// The accumulation kernel of autodiff and the basis of add/sub.
#version 460
#include "common.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

layout(push_constant, std430) uniform Push {
  F32Buf a;
  F32Buf b;
  F32Buf out_;
  uint n;
  float alpha;
} p;

void main() {
  uint i = flat_invocation(LOCAL_SIZE);
  if (i >= p.n) return;
  p.out_.v[i] = p.a.v[i] + p.alpha * p.b.v[i];
}
