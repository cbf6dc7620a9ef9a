// Attention of one new query per row over a KV cache, for a decode step recorded once and
// replayed: how many keys the cache holds is read from a device buffer (cached[0]; the query sits
// at position cached[0] and attends over slots 0..cached[0]), never from push constants.
//
// Work: one workgroup per (kv head, group of HPW query heads sharing it, row, split). The K and V
// rows are read once for the whole group of query heads. 128 invocations = 16 lane groups of 8
// consecutive invocations; a lane group takes one key at a time, each lane DPL consecutive dims of
// it (vec4 loads where VEC4), and the dot products over D end in a butterfly of subgroup shuffles
// over the 8 lanes (so a lane group must lie inside one subgroup: the host requires subgroups of
// at least 8). A pass covers 16 * KPT keys (KPT per lane group, all loads of a pass issued before
// any is used); every lane group keeps its own online softmax (running max, sum and weighted
// values of its keys) over the passes, and the 16 are combined at the end in lane-group order
// through shared memory. No barrier inside the key loop.
//
// Long caches are split over `splits` workgroups (grid z) by whole passes, as evenly as the
// filled length allows, at least MIN_PASSES passes each (decided on the device from cached[0], so
// every workgroup agrees). With one split active it writes the output; with more, each writes its
// partial (max, sum, weighted values) to scratch and attention_decode_combine.comp, the next
// dispatch, combines them in split order. Deterministic throughout: fixed summation orders.
//
// With FLAG_ROPE (the fused decode step, ops::attention_decode_rope) the kernel also applies the
// step's rotary embedding: each workgroup rotates its own queries, and the newest key (slot
// cached[0]) is rotated from k_new and taken with v_new from registers instead of from the cache
// slot, which this dispatch is writing: exactly one workgroup per (kv head, row) (the first head
// group, the split holding the newest key) writes rope(k_new) and v_new there, and nothing in the
// dispatch reads that slot. The rotation is rope_pair.glsl's, bitwise rope_kv_write.comp's, so
// the result equals rope_kv_write followed by this kernel without the flag, bit for bit.
//
// Layouts (f32, contiguous): q, o [B, 1, Hq, D]; k_new, v_new [B, 1, Hkv, D]; caches
// [B, capacity, Hkv, D]; mask I32 [B, capacity] (nonzero = token); cos, sin [P, half]; pos I32
// [B]. Scratch (splits > 1): per (x, y, split, head of the group) one record of D + 2 VACC: max,
// sum, values. Rows that see no key output zeros (as ops::attention).
//
// lavapipe (Mesa 22.3) computed wrong results for variants of this kernel that look correct: one
// whose new-key writer read shared memory in a thread-strided loop right after a barrier, and one
// that combined the splits inside this dispatch (atomic arrival counter, a shared flag read after
// a barrier). Hence the writer takes the new key from registers, the combine is a second
// dispatch, and the loads are branch-free (clamped rows and selects, which also keep lanes
// converged on GPUs). The tests run this kernel on lavapipe: keep them passing there. Under
// UNIFORM_LOOPS every loop that touches shared memory runs equally often in every invocation
// (lavapipe miscompiles the memory-model build of one that does not, see matmul_skinny_f16.comp's
// compute_norm_rstd); the host sets it only there, since the strided loops cost less elsewhere.
//
// The `chained_vmm` variant can be chained (stage_chain_push.glsl; the Vulkan memory model,
// common.glsl's VKF_VMM): it waits for the stage that wrote q, k_new and v_new and counts itself
// done at the end. Its push block makes room for the chain fields by deriving two addresses
// (launch_fast in ops/decode_attention.cpp checks that they hold): the sin table follows the cos
// table ([2, P, half]), and cached[0] follows the B positions (without FLAG_ROPE the `pos` field
// is `cached` itself). Its first pass's cache loads go out before the wait, and so before the
// queries are read (the plain build loads them inside the pass loop).
//!variant chained_vmm -DCHAINED=1 -DVKF_VMM=1
//!precise
#version 460
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "precise_math.glsl"
#include "attention_common.glsl"
#include "rope_pair.glsl"

layout(constant_id = 0) const uint DPL = 8;   // dims per lane: ceil(D / 8)
layout(constant_id = 1) const uint HPW = 4;   // query heads per workgroup
layout(constant_id = 2) const uint KPT = 4;   // keys per lane group per pass
layout(constant_id = 3) const bool VEC4 = false;  // DPL % 4 == 0, D % 4 == 0, 16-byte rows
// Every loop that touches shared memory runs equally often in every invocation (see the header;
// the host's rule: vmm_builds_need_uniform_loops in src/core/launch.h).
layout(constant_id = 4) const bool UNIFORM_LOOPS = false;

#define NT 128
#define LANES 8
#define GROUPS 16          // NT / LANES
#define SLICE 128          // dims combined per round at the end
#if SLICE != NT
#error "the final combine has every invocation read one slice entry"
#endif
// Where the newest key's rotated values enter kr / vr (see LOAD_PASS): in the loads (plain
// build), or after them (chained build, whose first pass loads before they exist).
#define IN_LOADS (CHAINED == 0)
#define MIN_PASSES 2       // mirrored by kMinPassesPerSplit in src/ops/decode_attention.cpp
const uint FLAG_ROPE = 4u;         // kFlagRope in src/ops/decode_attention.cpp (FLAG_MASK is 1)
const uint FLAG_INTERLEAVED = 8u;

layout(local_size_x = NT) in;

layout(buffer_reference, std430, buffer_reference_align = 8) buffer PartialBuf { VACC v[]; };

#ifndef CHAINED
#define CHAINED 0
#endif
#if CHAINED
#include "stage_chain_push.glsl"
#endif
layout(push_constant, std430) uniform Push {
  F32Buf q;       // [B, 1, Hq, D] (not yet rotated under FLAG_ROPE)
  F32Buf k_new;   // [B, 1, Hkv, D], FLAG_ROPE only
  F32Buf v_new;   // [B, 1, Hkv, D], FLAG_ROPE only
  F32Buf cos_;    // [P, half], FLAG_ROPE only (CHAINED: the sin table follows it)
#if !CHAINED
  F32Buf sin_;
#endif
  I32Buf pos;     // [B] rotary positions, FLAG_ROPE only (CHAINED: cached follows them)
#if !CHAINED
  I32Buf cached;  // cached[0]: keys before this step (and the slot of the new one)
#endif
  F32Buf k;       // cache [B, capacity, Hkv, D]
  F32Buf v;
  I32Buf mask;    // [B, capacity], FLAG_MASK only
  F32Buf o;       // [B, 1, Hq, D]
  uint64_t scratch;  // partial records; used when the grid has more than one split
  uint capacity;
  uint heads;     // Hq | Hkv << 16
  uint window;    // 0: none; else keys j <= position - window are hidden
  uint table_rows;  // P
  uint d;         // head dim
  uint half_flags;  // rotary_dim / 2 | flags << 16 (FLAG_MASK, FLAG_ROPE, FLAG_INTERLEAVED)
  float scale;
  float softcap;
#if CHAINED
  STAGE_CHAIN_PUSH_FIELDS
#endif
} p;
#if CHAINED
#include "stage_chain.glsl"
#endif

shared float sQ[HPW * LANES * DPL];  // the group's queries (rotated under FLAG_ROPE), zero-padded
shared float sNewK[LANES * DPL];     // FLAG_ROPE: the new key, rotated, and the new value
shared float sNewV[LANES * DPL];
shared float sM[GROUPS * HPW];   // each lane group's running max, per head
shared VACC sL[GROUPS * HPW];    // each lane group's sum, rescaled to the workgroup's max
shared VACC sAcc[GROUPS * SLICE];  // each lane group's values of one head, one slice of dims

// The rotary sin table and the cached-keys buffer (derived in the chained variant, see above).
F32Buf sin_table() {
#if CHAINED
  return F32Buf(uint64_t(p.cos_) + 4ul * uint64_t(p.table_rows) * uint64_t(p.half_flags & 0xffffu));
#else
  return p.sin_;
#endif
}
I32Buf cached_buf() {
#if CHAINED
  const bool rope = ((p.half_flags >> 16) & FLAG_ROPE) != 0u;
  return I32Buf(uint64_t(p.pos) + (rope ? 4ul * uint64_t(gl_NumWorkGroups.y) : 0ul));
#else
  return p.cached;
#endif
}

// Element e of row `row` of x [rows, D], rotated at the rotary position of batch row b.
float rotated(F32Buf x, uint row, uint e, uint b, uint D) {
  const uint half_ = p.half_flags & 0xffffu;
  const uint at = uint(clamp(p.pos.v[b], 0, int(p.table_rows) - 1));
  return rope_element(x, row * D, e, p.cos_, sin_table(), at, half_,
                      ((p.half_flags >> 16) & FLAG_INTERLEAVED) != 0u);
}

// The loads of pass ps into kr, vr, seen and newest (a macro: arrays sized by specialization
// constants do not pass through functions in this glslc), keys j = j_lo + ps * PASS + i * GROUPS
// + grp, every load of the pass first and without branches (see the header): keys past the range
// read the last key's row and are hidden by `seen`. The newest key's slot, which this dispatch
// writes, is never read: its lanes read the projections k_new / v_new instead, or, before the
// wait for the stage that writes those (`early`), the row of the key before it. Their values are
// the rotated ones in nk / nv: taken in the loads in the plain build, replaced after them
// (`newest`) in the chained one (on the H200 each form was the faster in its build: bench/
// RESULTS.md, twenty-sixth session). D % 4 == 0 under VEC4: vec4s lie wholly inside or past D.
#define LOAD_PASS(ps, early)                                                                 \
  [[unroll]] for (uint i = 0; i < KPT; ++i) {                                                \
    const int j = j_lo + int((ps) * PASS + i * GROUPS + grp);                                \
    const bool in_range = j < keys;                                                          \
    const int jc = min(j, keys - 1);                                                         \
    const bool is_new = fresh && jc == keys - 1;                                             \
    newest[i] = is_new;                                                                      \
    const int jr = is_new && (early) ? max(keys - 2, 0) : jc;                                \
    const bool proj = is_new && !(early);                                                    \
    const uint row = proj ? (b * hkv + hk) * D : ((b * cap + uint(jr)) * hkv + hk) * D;      \
    const uint64_t ksrc = proj ? uint64_t(p.k_new) : uint64_t(p.k);                          \
    const uint64_t vsrc = proj ? uint64_t(p.v_new) : uint64_t(p.v);                          \
    bool visible = in_range;                                                                 \
    if ((flags & FLAG_MASK) != 0u) visible = visible && p.mask.v[b * cap + uint(jc)] != 0;   \
    seen[i] = visible;                                                                       \
    if (VEC4) {                                                                              \
      [[unroll]] for (uint e = 0; e < DPL; e += 4u) {                                        \
        const uint dim = lane * DPL + e;                                                     \
        const uint at = (row + min(dim, D - 4u)) / 4u;                                       \
        const vec4 k4 = Vec4Buf(ksrc).v[at], v4 = Vec4Buf(vsrc).v[at];                       \
        [[unroll]] for (uint c = 0; c < 4u; ++c) {                                           \
          kr[i * DPL + e + c] = dim < D ? (IN_LOADS && proj ? nk[e + c] : k4[c]) : 0.0;      \
          vr[i * DPL + e + c] = dim < D ? (IN_LOADS && proj ? nv[e + c] : v4[c]) : 0.0;      \
        }                                                                                    \
      }                                                                                      \
    } else {                                                                                 \
      [[unroll]] for (uint e = 0; e < DPL; ++e) {                                            \
        const uint dim = lane * DPL + e;                                                     \
        const uint at = row + min(dim, D - 1u);                                              \
        const float kx = F32Buf(ksrc).v[at], vx = F32Buf(vsrc).v[at];                        \
        kr[i * DPL + e] = dim < D ? (IN_LOADS && proj ? nk[e] : kx) : 0.0;                   \
        vr[i * DPL + e] = dim < D ? (IN_LOADS && proj ? nv[e] : vx) : 0.0;                   \
      }                                                                                      \
    }                                                                                        \
  }

void main() {
  const uint t = gl_LocalInvocationID.x, lane = t % LANES, grp = t / LANES;
  const uint hq = p.heads & 0xffffu, hkv = p.heads >> 16, G = hq / hkv;
  const uint ng = gl_NumWorkGroups.x / hkv;  // head groups per kv head
  const uint hk = gl_WorkGroupID.x / ng, hg = gl_WorkGroupID.x - hk * ng;
  const uint b = gl_WorkGroupID.y, split = gl_WorkGroupID.z, splits = gl_NumWorkGroups.z;
  const uint D = p.d, cap = p.capacity, flags = p.half_flags >> 16;
  const uint h0 = hk * G + hg * HPW;       // first query head of the group
  const uint nh = min(HPW, G - hg * HPW);  // heads in the group
  const int cached = cached_buf().v[0];
  const int keys = clamp(cached + 1, 0, int(cap));
  const int qpos = keys - 1;
  // Under FLAG_ROPE the newest key comes from k_new / v_new (and is written to its slot here).
  const bool fresh = (flags & FLAG_ROPE) != 0u && cached >= 0 && cached < int(cap);
  const int j_lo = p.window != 0u ? max(0, qpos - int(p.window) + 1) : 0;
  const uint PASS = GROUPS * KPT;
  const uint npass = keys > j_lo ? (uint(keys - j_lo) + PASS - 1u) / PASS : 0u;
  const uint per_split = max(uint(MIN_PASSES), (npass + splits - 1u) / splits);
  const uint n_active = max(1u, (npass + per_split - 1u) / per_split);
  // The first pass's loads go out before the wait: they read only cache rows, which no stage that
  // can be waited on writes (only this dispatch's writer, at the newest slot, which they skip),
  // and the mask; not where the newest key is the only one.
  const uint ps_begin = split * per_split, pass_end = min(npass, (split + 1u) * per_split);
  const bool preloaded =
      CHAINED != 0 && split < n_active && ps_begin < pass_end && (!fresh || keys >= 2);
  float kr[KPT * DPL], vr[KPT * DPL];  // this lane's dims of its keys of the pass
  bool seen[KPT], newest[KPT];
  float nk[DPL], nv[DPL];  // this lane's dims of the new key and value (set after the wait)
  if (preloaded) {
    LOAD_PASS(ps_begin, true)
  }
#if CHAINED
  stage_chain_wait();  // q, k_new and v_new come from the stage before
#endif
  if (split < n_active) {  // uniform over the workgroup

    // The group's queries (rotated here under FLAG_ROPE) and the new key and value, in shared
    // memory: every lane group reads them, and one call site each keeps the kernel small.
    const bool rope = (flags & FLAG_ROPE) != 0u;
    for (uint i0 = UNIFORM_LOOPS ? 0u : t; i0 < HPW * LANES * DPL; i0 += NT) {
      const uint i = i0 + (UNIFORM_LOOPS ? t : 0u);
      if (i >= HPW * LANES * DPL) continue;
      const uint g = i / (LANES * DPL), e = i - g * (LANES * DPL);
      float x = 0.0;
      if (g < nh && e < D) x = rope ? rotated(p.q, b * hq + h0 + g, e, b, D)
                                    : p.q.v[(b * hq + h0 + g) * D + e];
      sQ[i] = x;
    }
    for (uint e0 = UNIFORM_LOOPS ? 0u : t; e0 < LANES * DPL; e0 += NT) {
      const uint e = e0 + (UNIFORM_LOOPS ? t : 0u);
      if (e >= LANES * DPL) continue;
      sNewK[e] = fresh && e < D ? rotated(p.k_new, b * hkv + hk, e, b, D) : 0.0;
      sNewV[e] = fresh && e < D ? p.v_new.v[(b * hkv + hk) * D + e] : 0.0;
    }
    barrier();
    [[unroll]] for (uint e = 0; e < DPL; ++e) {
      nk[e] = sNewK[lane * DPL + e];
      nv[e] = sNewV[lane * DPL + e];
    }
    if (fresh && hg == 0u && split == n_active - 1u) {
      // The one writer of the new slot for this (kv head, row).
      const uint dst = ((b * cap + uint(cached)) * hkv + hk) * D;
      [[unroll]] for (uint e = 0; e < DPL; ++e) {
        if (grp == 0u && lane * DPL + e < D) {
          p.k.v[dst + lane * DPL + e] = nk[e];
          p.v.v[dst + lane * DPL + e] = nv[e];
        }
      }
    }
    float qr[HPW * DPL];  // this lane's dims of the group's queries
    [[unroll]] for (uint g = 0; g < HPW; ++g) {
      [[unroll]] for (uint i = 0; i < DPL; ++i)
        qr[g * DPL + i] = sQ[(g * LANES + lane) * DPL + i];
    }

    AttnParams ap;
    ap.scale = p.scale;
    ap.softcap = p.softcap;
    float m[HPW];      // this lane group's running max per head
    VACC l[HPW];       // its running sum of exp(score - m)
    VACC acc[HPW * DPL];  // its weighted values, this lane's dims
    [[unroll]] for (uint g = 0; g < HPW; ++g) {
      m[g] = MASKED;
      l[g] = VACC(0.0);
      [[unroll]] for (uint i = 0; i < DPL; ++i) acc[g * DPL + i] = VACC(0.0);
    }

    for (uint ps = ps_begin; ps < pass_end; ++ps) {
      if (ps != ps_begin || !preloaded) {
        LOAD_PASS(ps, false)
      }
      if (!IN_LOADS) {
        // The newest key's rotated values, from registers.
        [[unroll]] for (uint i = 0; i < KPT; ++i) {
          [[unroll]] for (uint e = 0; e < DPL; ++e) {
            if (newest[i]) {
              kr[i * DPL + e] = lane * DPL + e < D ? nk[e] : 0.0;
              vr[i * DPL + e] = lane * DPL + e < D ? nv[e] : 0.0;
            }
          }
        }
      }
      // Scores: this lane's part of each dot product, then the butterfly over the lane group (every
      // lane ends with the same sum: a + b == b + a).
      float s[KPT * HPW];
      [[unroll]] for (uint i = 0; i < KPT; ++i) {
        [[unroll]] for (uint g = 0; g < HPW; ++g) {
          VACC dot = VACC(0.0);
          [[unroll]] for (uint e = 0; e < DPL; ++e)
            dot += VACC(qr[g * DPL + e]) * VACC(kr[i * DPL + e]);
          dot += subgroupShuffleXor(dot, 4u);
          dot += subgroupShuffleXor(dot, 2u);
          dot += subgroupShuffleXor(dot, 1u);
          s[i * HPW + g] = seen[i] ? transform_score(ap, float(dot)) : MASKED;
        }
      }
      // The lane group's online softmax over its KPT keys of the pass, keys in order.
      [[unroll]] for (uint g = 0; g < HPW; ++g) {
        float m_new = m[g];
        [[unroll]] for (uint i = 0; i < KPT; ++i) m_new = max(m_new, s[i * HPW + g]);
        const float alpha = m[g] == MASKED ? 0.0 : vexp(m[g] - m_new);
        VACC sum = l[g] * VACC(alpha);
        [[unroll]] for (uint e = 0; e < DPL; ++e) acc[g * DPL + e] *= VACC(alpha);
        [[unroll]] for (uint i = 0; i < KPT; ++i) {
          const float pr = s[i * HPW + g] == MASKED ? 0.0 : vexp(s[i * HPW + g] - m_new);
          sum += VACC(pr);
          [[unroll]] for (uint e = 0; e < DPL; ++e)
            acc[g * DPL + e] += VACC(pr) * VACC(vr[i * DPL + e]);
        }
        l[g] = sum;
        m[g] = m_new;
      }
    }

    // The lane groups' softmaxes, combined in lane-group order: max, then sums and values rescaled
    // to it.
    if (lane == 0u) {
      [[unroll]] for (uint g = 0; g < HPW; ++g) sM[grp * HPW + g] = m[g];
    }
    barrier();
    float wm[HPW];     // the workgroup's max per head
    VACC w[HPW];       // this lane group's factor exp(m - max)
    [[unroll]] for (uint g = 0; g < HPW; ++g) {
      float mx = MASKED;
      for (uint r = 0; r < GROUPS; ++r) mx = max(mx, sM[r * HPW + g]);
      wm[g] = mx;
      w[g] = VACC(m[g] == MASKED ? 0.0 : vexp(m[g] - mx));
      if (lane == 0u) sL[grp * HPW + g] = l[g] * w[g];
    }
    const bool partial = n_active > 1u;
    const uint set = b * gl_NumWorkGroups.x + gl_WorkGroupID.x;  // (kv head group, row)
    const uint record = D + 2u;  // max, sum, values
    PartialBuf part = PartialBuf(p.scratch);
    [[unroll]] for (uint g = 0; g < HPW; ++g) {
      if (g >= nh) break;
      for (uint d0 = 0; d0 < D; d0 += SLICE) {
        barrier();  // sL written; the previous round's sAcc read
        [[unroll]] for (uint e = 0; e < DPL; ++e) {
          const uint dim = lane * DPL + e;
          if (dim >= d0 && dim < min(D, d0 + SLICE))
            sAcc[grp * SLICE + dim - d0] = acc[g * DPL + e] * w[g];
        }
        barrier();
        const uint dim = d0 + t;
        VACC sum = VACC(0.0), val = VACC(0.0);
        if (UNIFORM_LOOPS || dim < D) {  // UNIFORM_LOOPS: by every invocation (t < SLICE == NT)
          for (uint r = 0; r < GROUPS; ++r) {
            sum += sL[r * HPW + g];
            val += sAcc[r * SLICE + t];
          }
        }
        if (dim < D) {
          if (partial) {
            const uint rec = ((set * splits + split) * HPW + g) * record;
            if (dim == 0u) {
              part.v[rec] = VACC(wm[g]);
              part.v[rec + 1u] = sum;
            }
            part.v[rec + 2u + dim] = val;
          } else {
            p.o.v[(b * hq + h0 + g) * D + dim] = sum > 0.0 ? float(val / sum) : 0.0;
          }
        }
      }
    }
  }
#if CHAINED
  stage_chain_signal();
#endif
}
