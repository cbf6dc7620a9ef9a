// Adds the per-query-head partials of dk and dv that attention_fast_bwd_dkv.comp writes under
// GQA into the key/value heads' gradients: dk[b, j, hk, :] = sum over g < group, in ascending g,
// of part_k[b, j, hk * group + g, :] (and the same for dv). The `group` partials of one output row
// are consecutive rows of [B, Tk, Hq, D], so each invocation reads `group` floats D apart and
// writes one of dk and one of dv. A fixed order of additions: deterministic, no atomics.
#version 460
#include "common.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

layout(push_constant, std430) uniform Push {
  F32Buf part_k;  // [B, Tk, Hq, D]
  F32Buf part_v;  // [B, Tk, Hq, D]
  F32Buf dk;      // [B, Tk, Hkv, D]
  F32Buf dv;      // [B, Tk, Hkv, D]
  uint n;         // B * Tk * Hkv * D
  uint d;         // head dim
  uint group;     // Hq / Hkv
} p;

void main() {
  const uint e = flat_invocation(LOCAL_SIZE);
  if (e >= p.n) return;
  // Output row e / d (over b, j, hk) owns partial rows (e / d) * group + g.
  const uint first = (e / p.d) * p.group * p.d + e % p.d;
  float sk = p.part_k.v[first], sv = p.part_v.v[first];
  for (uint g = 1; g < p.group; ++g) {
    sk += p.part_k.v[first + g * p.d];
    sv += p.part_v.v[first + g * p.d];
  }
  p.dk.v[e] = sk;
  p.dv.v[e] = sv;
}
