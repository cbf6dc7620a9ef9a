// Inverted dropout over a contiguous f32 tensor: out[i] = x[i] * scale when element i is kept,
// else 0, where the keep decision is Philox of (seed, offset + i) (philox.glsl). The backward pass
// is the same kernel on the output gradient with the same seed and offset. The `bits` variant
// writes the raw random words instead (ops::dropout_bits, for tests against the CPU reference).
//!novariant_base
//!variant apply -DBITS=0
//!variant bits -DBITS=1
#version 460
#include "common.glsl"
#include "philox.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

layout(push_constant, std430) uniform Push {
  F32Buf x;      // [n] (unused by `bits`)
  U32Buf out_;   // [n]: f32 bit patterns (apply) or random words (bits)
  uint n;
  uint threshold;  // ceil(p * 2^24)
  float scale;     // 1 / (1 - p), 0 when p = 1
  uint seed_lo, seed_hi;
  uint offset_lo, offset_hi;
} p;

void main() {
  const uint i = flat_invocation(LOCAL_SIZE);
  if (i >= p.n) return;
  const uvec2 seed = uvec2(p.seed_lo, p.seed_hi);
  const uvec2 ctr = add64(uvec2(p.offset_lo, p.offset_hi), uvec2(i, 0u));
#if BITS
  p.out_.v[i] = dropout_word(seed, ctr);
#else
  const float y = dropout_keep(seed, ctr, p.threshold) ? p.x.v[i] * p.scale : 0.0;
  p.out_.v[i] = floatBitsToUint(y);
#endif
}
