// out[i] = a[i] + alpha * b[i] over contiguous f32 tensors (out may alias a for in-place).
// The accumulation kernel of autodiff and the basis of add/sub. The precise build rounds once.
//!precise
#version 460
#include "common.glsl"
#include "precise_math.glsl"
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
  p.out_.v[i] = float(VACC(p.a.v[i]) + VACC(p.alpha) * VACC(p.b.v[i]));
}
