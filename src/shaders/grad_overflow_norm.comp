// GradScaler's inf/nan check folded into the gradient-norm pass: one read of every (scaled)
// gradient gives the L2 norm of the unscaled gradients g * inv_scale and whether any element of g
// is inf or NaN, in the two fixed-order levels of reduce_flat.comp (chunks of 4096 elements,
// invocation t takes start+t, start+t+256, ..., then a fixed shared-memory tree):
//   LEVEL 0, over one gradient: partial[out_offset + g] = sum of (x * inv_scale)^2 over chunk g,
//            partial[flag_offset + out_offset + g] = 1 if the chunk holds an inf/NaN, else 0.
//   LEVEL 1, one workgroup over the partials: out[0] = sqrt(sum of the sums) (the norm that
//            clipping uses, as torch's clip_grad_norm_ measures it after GradScaler.unscale_),
//            out[1] = 1 if any chunk was flagged (torch's found_inf), else 0.
// The check is on the scaled value, as torch's _amp_foreach_non_finite_check_and_unscale_ checks
// it, and reads the exponent bits, so no fast-math assumption about NaN can drop it.
#version 460
#include "common.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

layout(constant_id = 0) const uint LEVEL = 0;

layout(push_constant, std430) uniform Push {
  F32Buf in_;        // LEVEL 0: a contiguous gradient; LEVEL 1: the partials [2 * parts]
  F32Buf out_;       // LEVEL 0: the partials; LEVEL 1: [2] = norm, found_inf
  uint n;            // elements of in_ to reduce (LEVEL 1: parts)
  uint chunk;        // elements per workgroup (LEVEL 1: parts, one workgroup)
  uint out_offset;   // LEVEL 0: this gradient's first chunk among all gradients'
  uint flag_offset;  // where the flags half of the partials starts (= parts)
  float inv_scale;   // LEVEL 0: 1 / loss scale
} p;

shared float sums[LOCAL_SIZE];
shared float flags[LOCAL_SIZE];

bool non_finite(float x) { return (floatBitsToUint(x) & 0x7f800000u) == 0x7f800000u; }

void main() {
  uint g = flat_group();
  uint start = g * p.chunk;
  if (start >= p.n) return;  // uniform across the workgroup
  uint end = min(p.n, start + p.chunk);
  uint t = gl_LocalInvocationID.x;
  float acc = 0.0;
  float bad = 0.0;
  for (uint i = start + t; i < end; i += LOCAL_SIZE) {
    if (LEVEL == 0) {
      float x = p.in_.v[i];
      if (non_finite(x)) bad = 1.0;
      float u = x * p.inv_scale;
      acc += u * u;
    } else {
      acc += p.in_.v[i];
      bad = max(bad, p.in_.v[p.flag_offset + i]);
    }
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
    if (LEVEL == 0) {
      p.out_.v[p.out_offset + g] = sums[0];
      p.out_.v[p.flag_offset + p.out_offset + g] = flags[0];
    } else {
      p.out_.v[0] = sqrt(sums[0]);
      p.out_.v[1] = flags[0];
    }
  }
}
