// Deterministic sums over contiguous f32 data, the two levels of a large reduction: workgroup g
// sums elements [g*chunk, min(n, (g+1)*chunk)) (invocation t takes start+t, start+t+256, ... in
// order, then a fixed shared-memory tree) and writes out[out_offset + g]. The first level runs with
// chunk = 4096 over the input; the second with one workgroup over the partial sums. Spec
// constants: SQUARE sums x*x (norms); FINISH 0 writes the sum, 1 divides it by `divisor` (mean),
// 2 writes its square root (norm).
#version 460
#include "common.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

layout(constant_id = 0) const uint SQUARE = 0;
layout(constant_id = 1) const uint FINISH = 0;

layout(push_constant, std430) uniform Push {
  F32Buf in_;
  F32Buf out_;
  uint n;
  uint chunk;
  uint out_offset;
  float divisor;
} p;

shared float partial[LOCAL_SIZE];

void main() {
  uint g = flat_group();
  uint start = g * p.chunk;
  if (start >= p.n) return;  // uniform across the workgroup
  uint end = min(p.n, start + p.chunk);
  uint t = gl_LocalInvocationID.x;
  float acc = 0.0;
  for (uint i = start + t; i < end; i += LOCAL_SIZE) {
    float x = p.in_.v[i];
    acc += SQUARE != 0 ? x * x : x;
  }
  partial[t] = acc;
  barrier();
  for (uint s = LOCAL_SIZE / 2; s > 0; s >>= 1) {
    if (t < s) partial[t] += partial[t + s];
    barrier();
  }
  if (t == 0) {
    float total = partial[0];
    if (FINISH == 1) total = total / p.divisor;
    else if (FINISH == 2) total = sqrt(total);
    p.out_.v[p.out_offset + g] = total;
  }
}
