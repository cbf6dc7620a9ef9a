// The second level of GradScaler's inf/nan check folded into the gradient-norm pass
// (ops::grad_norm_and_overflow): one workgroup over the partials that multi_tensor_norm.comp
// (OVERFLOW 1) wrote, [sums of (x * inv_scale)^2 per chunk, then each chunk's inf/NaN flag], in the
// fixed order of reduce_flat.comp (invocation t takes t, t+256, ..., then a fixed shared-memory
// tree):
//   out[0] = sqrt(sum of the sums): the norm that clipping uses, as torch's clip_grad_norm_
//            measures it after GradScaler.unscale_;
//   out[1] = 1 if any chunk was flagged (torch's found_inf), else 0.
#version 460
#include "common.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

layout(push_constant, std430) uniform Push {
  F32Buf in_;        // the partials [2 * parts]
  F32Buf out_;       // [2] = norm, found_inf
  uint parts;
} p;

shared float sums[LOCAL_SIZE];
shared float flags[LOCAL_SIZE];

void main() {
  uint t = gl_LocalInvocationID.x;
  float acc = 0.0;
  float bad = 0.0;
  for (uint i = t; i < p.parts; i += LOCAL_SIZE) {
    acc += p.in_.v[i];
    bad = max(bad, p.in_.v[p.parts + i]);
  }
  sums[t] = acc;
  flags[t] = bad;
  barrier();
  for (uint s = LOCAL_SIZE / 2; s > 0; s >>= 1) {
    if (t < s) {
      sums[t] += sums[t + s];
      flags[t] = max(flags[t], flags[t + s]);
    }
    barrier();
  }
  if (t == 0) {
    p.out_.v[0] = sqrt(sums[0]);
    p.out_.v[1] = flags[0];
  }
}
