// The second dispatch of attention_decode_fast.comp when its grid splits the cache: for each
// (kv head group, row) whose filled length made more than one split active, combines the splits'
// partial softmaxes (max m_s, sum l_s, weighted values a_s of each head) in split order:
// o = sum_s a_s exp(m_s - M) / sum_s l_s exp(m_s - M), M = max_s m_s. Which splits were active
// is recomputed from cached[0] exactly as the first kernel decides it; with one active, the first
// kernel wrote the output itself and this one does nothing. Rows that saw no key output zeros.
// Layouts: o [B, 1, Hq, D] f32; partials per ((row * x + x) * splits + split) * heads_per_group
// + head: D + 2 VACC (max, sum, values). Grid: x = kv heads * head groups, y = rows.
//!precise
#version 460
#include "common.glsl"
#include "precise_math.glsl"
#include "attention_common.glsl"

#define NT 64
#define MIN_PASSES 2  // attention_decode_fast.comp's
layout(local_size_x = NT) in;

layout(buffer_reference, std430, buffer_reference_align = 8) buffer PartialBuf { VACC v[]; };

layout(push_constant, std430) uniform Push {
  I32Buf cached;   // cached[0]: keys before this step
  F32Buf o;        // [B, 1, Hq, D]
  PartialBuf part;
  uint capacity;
  uint heads;      // Hq | Hkv << 16
  uint window;     // as attention_decode_fast's
  uint d;
  uint heads_per_group;
  uint splits;
  uint pass_keys;  // keys per pass of attention_decode_fast (16 * KPT)
} p;

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint hq = p.heads & 0xffffu, hkv = p.heads >> 16, G = hq / hkv;
  const uint ng = gl_NumWorkGroups.x / hkv;
  const uint hk = gl_WorkGroupID.x / ng, hg = gl_WorkGroupID.x - hk * ng;
  const uint b = gl_WorkGroupID.y, D = p.d, HPW = p.heads_per_group, splits = p.splits;
  const uint h0 = hk * G + hg * HPW, nh = min(HPW, G - hg * HPW);
  // The first kernel's split decision, from the same inputs.
  const int keys = clamp(p.cached.v[0] + 1, 0, int(p.capacity));
  const int j_lo = p.window != 0u ? max(0, keys - int(p.window)) : 0;
  const uint npass = keys > j_lo ? (uint(keys - j_lo) + p.pass_keys - 1u) / p.pass_keys : 0u;
  const uint per_split = max(uint(MIN_PASSES), (npass + splits - 1u) / splits);
  const uint n_active = max(1u, (npass + per_split - 1u) / per_split);
  if (n_active < 2u) return;
  const uint set = b * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  const uint record = D + 2u;
  for (uint g = 0; g < nh; ++g) {
    for (uint dim = t; dim < D; dim += NT) {
      float mx = MASKED;
      for (uint sp = 0; sp < n_active; ++sp)
        mx = max(mx, float(p.part.v[((set * splits + sp) * HPW + g) * record]));
      VACC sum = VACC(0.0), val = VACC(0.0);
      for (uint sp = 0; sp < n_active; ++sp) {
        const uint rec = ((set * splits + sp) * HPW + g) * record;
        const float ms = float(p.part.v[rec]);
        const VACC f = VACC(ms == MASKED ? 0.0 : vexp(ms - mx));
        sum += p.part.v[rec + 1u] * f;
        val += p.part.v[rec + 2u + dim] * f;
      }
      p.o.v[(b * hq + h0 + g) * D + dim] = sum > 0.0 ? float(val / sum) : 0.0;
    }
  }
}
