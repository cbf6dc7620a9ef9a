// Attention of one new query per row against a KV cache, for a decode step that is recorded once
// and replayed: how many keys the cache holds is read from a device buffer (the step's "cached"
// count; the new key is already written at that slot), not from push constants, so the same
// recording serves every step. The caches keep their full [B, capacity, Hkv, D] layout: no copy of
// the filled part. One workgroup per (query head, row); keys in chunks of NT: each thread scores
// one key, a fixed tree gives the chunk's max and sum (online softmax), and each thread owns up to
// two of the D output dims for the products with v. The query sits at position keys - 1, so the
// causal rule hides nothing and the sliding window starts at keys - window. Rows that see no key
// output zeros (as ops::attention). Deterministic: fixed reduction orders. The dot products over
// D and over the chunk's keys issue their loads U at a time: a loop of one load feeding one
// multiply-add would wait a full memory latency per element.
// Layouts (f32, contiguous): q, o [B, 1, Hq, D]; caches [B, capacity, Hkv, D]; mask I32
// [B, capacity] (nonzero = token). Grid: x = query heads, y = rows.
//!precise
#version 460
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "precise_math.glsl"
#include "attention_common.glsl"
#define NT 128
#define DMAX 256

layout(push_constant, std430) uniform Push {
  F32Buf q;
  F32Buf k;       // cache [B, capacity, Hkv, D]
  F32Buf v;
  I32Buf mask;    // [B, capacity], read when flags has FLAG_MASK
  F32Buf o;
  I32Buf cached;  // cached[0]: keys before this step; this step attends over cached[0] + 1
  AttnParams a;   // tk = capacity; tq = 1; q_offset unused (the query sits after the cache)
  uint flags;
} p;

#define U 8  // loads in flight per thread in the dot products
layout(local_size_x = NT) in;

shared float sQ[DMAX];
shared float sP[NT];     // scores, then probabilities, of the chunk
shared VACC sRed[NT];    // reduction tree

// acc + sum over the chunk's n keys (rows row0 + jj * hkv of the cache) of p_jj * v[jj, d], keys
// in increasing order, loads issued U at a time.
VACC weighted_values(VACC acc, uint row0, uint n, uint d) {
  const uint D = p.a.d;
  uint jj = 0;
  for (; jj + U <= n; jj += U) {
    float vv[U];
    [[unroll]] for (uint u = 0; u < U; ++u) vv[u] = p.v.v[(row0 + (jj + u) * p.a.hkv) * D + d];
    [[unroll]] for (uint u = 0; u < U; ++u) acc += VACC(sP[jj + u]) * VACC(vv[u]);
  }
  for (; jj < n; ++jj) acc += VACC(sP[jj]) * VACC(p.v.v[(row0 + jj * p.a.hkv) * D + d]);
  return acc;
}

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint h = gl_WorkGroupID.x, b = gl_WorkGroupID.y;
  const uint D = p.a.d, cap = p.a.tk;
  const uint hk = h / (p.a.hq / p.a.hkv);
  const int keys = clamp(p.cached.v[0] + 1, 0, int(cap));
  const int qpos = keys - 1;
  for (uint d = t; d < D; d += NT) sQ[d] = p.q.v[(b * p.a.hq + h) * D + d];

  float m = MASKED;         // running max
  VACC l = VACC(0.0);       // running sum of exp(score - m)
  VACC acc0 = VACC(0.0), acc1 = VACC(0.0);  // output dims t and t + NT
  const int j_lo = p.a.window != 0 ? max(0, qpos - int(p.a.window) + 1) : 0;
  for (int j0 = j_lo; j0 < keys; j0 += NT) {
    barrier();  // sQ written (first chunk); sP and sRed of the previous chunk consumed
    const int j = j0 + int(t);
    float s = MASKED;
    bool ok = j < keys && position_visible(p.a, qpos, j);
    if (ok && (p.flags & FLAG_MASK) != 0u) ok = p.mask.v[b * cap + uint(j)] != 0;
    if (ok) {
      // Loads issued U at a time, so a thread's row is not one chain of dependent loads.
      const uint base = ((b * cap + uint(j)) * p.a.hkv + hk) * D;
      VACC dot = VACC(0.0);
      uint d = 0;
      for (; d + U <= D; d += U) {
        float kv[U];
        [[unroll]] for (uint u = 0; u < U; ++u) kv[u] = p.k.v[base + d + u];
        [[unroll]] for (uint u = 0; u < U; ++u) dot += VACC(sQ[d + u]) * VACC(kv[u]);
      }
      for (; d < D; ++d) dot += VACC(sQ[d]) * VACC(p.k.v[base + d]);
      s = transform_score(p.a, float(dot));
    }
    sRed[t] = VACC(s);
    barrier();
    for (uint st = NT / 2; st > 0; st /= 2) {
      if (t < st) sRed[t] = max(sRed[t], sRed[t + st]);
      barrier();
    }
    const float m_new = max(m, float(sRed[0]));
    barrier();  // everyone has read sRed[0]
    const float pr = s == MASKED ? 0.0 : vexp(s - m_new);
    sP[t] = pr;
    sRed[t] = VACC(pr);
    barrier();
    for (uint st = NT / 2; st > 0; st /= 2) {
      if (t < st) sRed[t] += sRed[t + st];
      barrier();
    }
    const float alpha = m == MASKED ? 0.0 : vexp(m - m_new);
    l = l * VACC(alpha) + sRed[0];
    m = m_new;
    const uint n = uint(min(NT, keys - j0));
    const uint row0 = (b * cap + uint(j0)) * p.a.hkv + hk;
    if (t < D) acc0 = weighted_values(acc0 * VACC(alpha), row0, n, t);
    if (t + NT < D) acc1 = weighted_values(acc1 * VACC(alpha), row0, n, t + NT);
  }
  const uint obase = (b * p.a.hq + h) * D;
  if (t < D) p.o.v[obase + t] = l > 0.0 ? float(acc0 / l) : 0.0;
  if (t + NT < D) p.o.v[obase + t + NT] = l > 0.0 ? float(acc1 / l) : 0.0;
}
