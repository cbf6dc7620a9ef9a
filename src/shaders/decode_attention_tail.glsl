// The one-query attention of a decode step, run at the end of the q/k/v product that feeds it:
// matmul_skinny_f16.comp's `attend` build (ops::normed_qkv_attention). The product's workgroups
// each store one block of rows of the stacked [q | k | v] output and count it: a k or v block for
// its kv head, a q block for its query head. The workgroup whose q block is the last of its head
// waits a while until every k and v block of the head's kv head has been counted, then
// computes the head's attention here (or, see below, leaves it to the last of those blocks), with rotary embedding and the append of the newest key and
// value, as attention_decode_fast.comp does in a dispatch of its own (FLAG_ROPE, one head per
// workgroup, one split). One dependent stage fewer per layer. (The first form let whichever block
// arrived last attend: two times in three a k or v block, which then ran its kv head's four heads
// one after another; on an H100 that stage took 32 us against 16 for the two separate ones.)
//
// The wait is short and bounded: the k and v blocks take the lowest workgroup ids
// (matmul_skinny_f16.comp's attend_block), so on a GPU they started before the q blocks and are
// done or nearly. Where they are not done by the end of the wait (lavapipe, whose workers may not
// run them meanwhile), the head passes to them: each head counts its kv head's k and v blocks and
// then its last q block's end of waiting, and whichever count completes the head attends for it
// (a k or v block, for as many of its kv head's heads as it completes; `handoffs` counts those).
// Either way each head is computed once, after all its rows are stored, by the same code.
//
// The arithmetic is that kernel's plain build for one head and one split, step for step: the same
// lanes per key (8, DPL dims each), lane groups (16, of the workgroup's first 128 invocations),
// keys per pass (KPT), online softmax per lane group and combine in lane-group order; so the
// output is bitwise attention_decode_fast's (tests/test_decode_ops.cpp checks it), and decode
// steps give the same tokens with and without the fold. The newest key comes from registers, its
// cache slot written by the first head of each kv head only, as there.
//
// Memory (the legacy model, as the `fold` builds): the product's stores into the [q | k | v]
// output are coherent (matmul_push.glsl's MATMUL_COHERENT_OUTPUT), each invocation's buffer
// barrier orders them before the workgroup barrier after which its counting invocations add
// their arrivals, and the last arrival's workgroup reads q, k and v coherently after a buffer
// barrier of its own. The cache and the step's state were written by earlier dispatches.
//
// The record (ops::normed_qkv_attention writes it once and keeps it for every call with the same
// inputs; the counters are zero between dispatches, as the last arrivals leave them): the
// addresses and scalars attention_decode_fast takes in its push constants, the arrival counters
// and the fault count.
//
// Included by matmul_skinny_f16.comp after its push block (p.c: the [q | k | v] output, followed
// by the attention's [Hq * D] output; p.argmax_out: the record) and its `red` array, whose first
// GROUPS * SLICE entries the combine reuses.

#include "attention_common.glsl"
#include "rope_pair.glsl"

layout(constant_id = 13) const uint ATT_DPL = 8;      // dims per lane: ceil(D / 8)
layout(constant_id = 14) const uint ATT_KPT = 2;      // keys per lane group per pass
layout(constant_id = 15) const bool ATT_VEC4 = false; // DPL % 4 == 0, D % 4 == 0, 16-byte rows

#define ATT_NT 128        // invocations that attend (the workgroup's first)
#define ATT_LANES 8
#define ATT_GROUPS 16     // ATT_NT / ATT_LANES
#define ATT_SLICE 128     // dims combined per round
#define ATTEND_MAX_GROUP 64  // query heads per kv head (ops::normed_qkv_attention checks it)
#if ATT_GROUPS * ATT_SLICE > MMAX * LOCAL_SIZE
#error "the combine's values must fit in red"
#endif
const uint ATT_FLAG_INTERLEAVED = 8u;  // kFlagInterleaved in src/ops/decode_attention.cpp

// Mirrors the record ops::normed_qkv_attention writes (std430, 8-byte aligned).
layout(buffer_reference, std430, buffer_reference_align = 8) buffer AttendRecord {
  uint64_t cos_;     // f32 [P, half]
  uint64_t sin_;
  uint64_t pos;      // I32 [1]: the rotary position
  uint64_t cached;   // I32 [1]: keys before this step (and the slot of the new one)
  uint64_t cache_k;  // f32 [1, capacity, Hkv, D]
  uint64_t cache_v;
  uint64_t mask;     // I32 [1, capacity], FLAG_MASK only
  uint capacity;
  uint heads;        // Hq | Hkv << 16
  uint window;       // 0: none; else keys j <= position - window are hidden
  uint table_rows;   // P
  uint d;            // head dim
  uint half_flags;   // rotary_dim / 2 | flags << 16 (FLAG_MASK, FLAG_INTERLEAVED)
  float scale;
  float softcap;
  uint q_arrivals;   // q blocks per query head
  uint kv_arrivals;  // k and v blocks per kv head
  uint handoffs;     // heads a k or v block attended for (counted over every dispatch)
  uint unused;
  // Counted in each dispatch, zero between dispatches: q blocks stored per query head [Hq], then
  // per query head its kv head's k and v blocks stored and its last q block done waiting [Hq].
  uint counters[];
};
#define ATTEND_POLLS 4096u
#define ATTEND_COUNTERS_WORD 26u  // where AttendRecord::counters starts, in 4-byte words
// A counter polled with coherent volatile loads, as stage_chain.glsl's coherent build polls.
layout(buffer_reference, std430, buffer_reference_align = 4) coherent volatile buffer AttendPoll {
  uint v;
};
layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer AttendQkv {
  float v[];
};
layout(buffer_reference, std430, buffer_reference_align = 16) coherent buffer AttendQkv4 {
  vec4 v[];
};

shared uint attend_heads[ATTEND_MAX_GROUP];  // which of the block's heads this workgroup attends for
shared float att_q[ATT_LANES * ATT_DPL];    // the head's query, rotated, zero-padded
shared float att_new_k[ATT_LANES * ATT_DPL];  // the newest key, rotated, and value
shared float att_new_v[ATT_LANES * ATT_DPL];
shared float att_m[ATT_GROUPS];  // each lane group's running max
shared VACC att_l[ATT_GROUPS];   // each lane group's sum, rescaled to the head's max

// What the tail reads first, read at the kernel's start (attend_read_early, after the first
// weight loads go out) so that their latency passes under the product's: the record's shape
// fields, and the step's key count and position.
uint early_heads = 0, early_d = 0, early_q_arrivals = 0, early_kv_arrivals = 0;
int early_cached = 0, early_pos = 0;
void attend_read_early() {
  AttendRecord rec = AttendRecord(p.argmax_out);
  early_heads = rec.heads;
  early_d = rec.d;
  early_q_arrivals = rec.q_arrivals;
  early_kv_arrivals = rec.kv_arrivals;
  early_cached = I32Buf(rec.cached).v[0];
  early_pos = I32Buf(rec.pos).v[0];
}

// Element e of the stacked output's row starting at `base`, rotated at the step's position
// (rope_pair.glsl's rope_element, with the row read coherently).
float attend_rotated(AttendRecord rec, uint base, uint e, uint at) {
  const uint half_ = rec.half_flags & 0xffffu;
  if (e >= 2u * half_) return AttendQkv(p.c).v[base + e];
  const bool interleaved = ((rec.half_flags >> 16) & ATT_FLAG_INTERLEAVED) != 0u;
  const bool first = interleaved ? (e & 1u) == 0u : e < half_;
  const uint c = interleaved ? e >> 1 : (first ? e : e - half_);
  const uint i0 = interleaved ? 2u * c : c;
  const uint i1 = i0 + (interleaved ? 1u : half_);
  const float cs = F32Buf(rec.cos_).v[at * half_ + c], sn = F32Buf(rec.sin_).v[at * half_ + c];
  const float a = AttendQkv(p.c).v[base + i0], b = AttendQkv(p.c).v[base + i1];
  return first ? rope_first(a, b, cs, sn) : rope_second(a, b, cs, sn);
}

// Head h's attention (attention_decode_fast.comp's plain build, HPW 1, one split). All
// invocations call it (it has barriers); the first ATT_NT attend.
void attend_head(uint t, AttendRecord rec, uint h) {
  const bool attending = t < ATT_NT;
  const uint lane = t % ATT_LANES, grp = (t / ATT_LANES) % ATT_GROUPS;
  const uint hq = early_heads & 0xffffu, hkv = early_heads >> 16, G = hq / hkv, hk = h / G;
  const uint D = early_d, cap = rec.capacity, flags = rec.half_flags >> 16;
  const uint q_base = h * D, k_base = (hq + hk) * D, v_base = (hq + hkv + hk) * D;
  const int cached = early_cached;
  const int keys = clamp(cached + 1, 0, int(cap));
  const int qpos = keys - 1;
  const bool fresh = cached >= 0 && cached < int(cap);
  const int j_lo = rec.window != 0u ? max(0, qpos - int(rec.window) + 1) : 0;
  const uint PASS = ATT_GROUPS * ATT_KPT;
  const uint npass = keys > j_lo ? (uint(keys - j_lo) + PASS - 1u) / PASS : 0u;
  const uint at = uint(clamp(early_pos, 0, int(rec.table_rows) - 1));
  if (t < ATT_LANES * ATT_DPL) {
    att_q[t] = t < D ? attend_rotated(rec, q_base, t, at) : 0.0;
    att_new_k[t] = fresh && t < D ? attend_rotated(rec, k_base, t, at) : 0.0;
    att_new_v[t] = fresh && t < D ? AttendQkv(p.c).v[v_base + t] : 0.0;
  }
  barrier();
  float nk[ATT_DPL], nv[ATT_DPL], qr[ATT_DPL];
  [[unroll]] for (uint e = 0; e < ATT_DPL; ++e) {
    nk[e] = att_new_k[lane * ATT_DPL + e];
    nv[e] = att_new_v[lane * ATT_DPL + e];
    qr[e] = att_q[lane * ATT_DPL + e];
  }
  if (fresh && h % G == 0u && t < ATT_LANES) {  // the one writer of the new slot per kv head
    const uint dst = (uint(cached) * hkv + hk) * D;
    [[unroll]] for (uint e = 0; e < ATT_DPL; ++e) {
      if (lane * ATT_DPL + e < D) {
        F32Buf(rec.cache_k).v[dst + lane * ATT_DPL + e] = nk[e];
        F32Buf(rec.cache_v).v[dst + lane * ATT_DPL + e] = nv[e];
      }
    }
  }
  AttnParams ap;
  ap.scale = rec.scale;
  ap.softcap = rec.softcap;
  float m = MASKED;     // this lane group's running max
  VACC l = VACC(0.0);   // its running sum of exp(score - m)
  VACC acc_v[ATT_DPL];  // its weighted values, this lane's dims
  [[unroll]] for (uint e = 0; e < ATT_DPL; ++e) acc_v[e] = VACC(0.0);
  if (attending) {
    for (uint ps = 0; ps < npass; ++ps) {
      // The pass's loads, branch-free: keys past the range read the last key's row and are hidden
      // by `seen`; the newest key's lanes read the row before it (its own slot is being written)
      // and take the rotated values from registers.
      float kr[ATT_KPT * ATT_DPL], vr[ATT_KPT * ATT_DPL];
      bool seen[ATT_KPT];
      [[unroll]] for (uint i = 0; i < ATT_KPT; ++i) {
        const int j = j_lo + int(ps * PASS + i * ATT_GROUPS + grp);
        const int jc = min(j, keys - 1);
        const bool is_new = fresh && jc == keys - 1;
        const int jr = is_new ? max(keys - 2, 0) : jc;
        const uint row = (uint(jr) * hkv + hk) * D;
        bool visible = j < keys;
        if ((flags & FLAG_MASK) != 0u) visible = visible && I32Buf(rec.mask).v[uint(jc)] != 0;
        seen[i] = visible;
        if (ATT_VEC4) {
          [[unroll]] for (uint e = 0; e < ATT_DPL; e += 4u) {
            const uint dim = lane * ATT_DPL + e;
            const uint a4 = (row + min(dim, D - 4u)) / 4u;
            const vec4 k4 = Vec4Buf(rec.cache_k).v[a4], v4 = Vec4Buf(rec.cache_v).v[a4];
            [[unroll]] for (uint c = 0; c < 4u; ++c) {
              kr[i * ATT_DPL + e + c] = dim < D ? (is_new ? nk[e + c] : k4[c]) : 0.0;
              vr[i * ATT_DPL + e + c] = dim < D ? (is_new ? nv[e + c] : v4[c]) : 0.0;
            }
          }
        } else {
          [[unroll]] for (uint e = 0; e < ATT_DPL; ++e) {
            const uint dim = lane * ATT_DPL + e;
            const uint a1 = row + min(dim, D - 1u);
            const float kx = F32Buf(rec.cache_k).v[a1], vx = F32Buf(rec.cache_v).v[a1];
            kr[i * ATT_DPL + e] = dim < D ? (is_new ? nk[e] : kx) : 0.0;
            vr[i * ATT_DPL + e] = dim < D ? (is_new ? nv[e] : vx) : 0.0;
          }
        }
      }
      // Scores: this lane's part of each dot product, then the butterfly over the lane group.
      float s[ATT_KPT];
      [[unroll]] for (uint i = 0; i < ATT_KPT; ++i) {
        VACC dot = VACC(0.0);
        [[unroll]] for (uint e = 0; e < ATT_DPL; ++e)
          dot += VACC(qr[e]) * VACC(kr[i * ATT_DPL + e]);
        dot += subgroupShuffleXor(dot, 4u);
        dot += subgroupShuffleXor(dot, 2u);
        dot += subgroupShuffleXor(dot, 1u);
        s[i] = seen[i] ? transform_score(ap, float(dot)) : MASKED;
      }
      // The lane group's online softmax over its keys of the pass, keys in order.
      float m_new = m;
      [[unroll]] for (uint i = 0; i < ATT_KPT; ++i) m_new = max(m_new, s[i]);
      const float alpha = m == MASKED ? 0.0 : vexp(m - m_new);
      VACC sum = l * VACC(alpha);
      [[unroll]] for (uint e = 0; e < ATT_DPL; ++e) acc_v[e] *= VACC(alpha);
      [[unroll]] for (uint i = 0; i < ATT_KPT; ++i) {
        const float pr = s[i] == MASKED ? 0.0 : vexp(s[i] - m_new);
        sum += VACC(pr);
        [[unroll]] for (uint e = 0; e < ATT_DPL; ++e) acc_v[e] += VACC(pr) * VACC(vr[i * ATT_DPL + e]);
      }
      l = sum;
      m = m_new;
    }
  }
  // The lane groups' softmaxes, combined in lane-group order: max, then sums and values rescaled.
  if (attending && lane == 0u) att_m[grp] = m;
  barrier();
  float mx = MASKED;
  for (uint r = 0; r < ATT_GROUPS; ++r) mx = max(mx, att_m[r]);
  const VACC w = VACC(m == MASKED ? 0.0 : vexp(m - mx));
  if (attending && lane == 0u) att_l[grp] = l * w;
  for (uint d0 = 0; d0 < D; d0 += ATT_SLICE) {
    barrier();  // att_l written; the previous round's values read
    [[unroll]] for (uint e = 0; e < ATT_DPL; ++e) {
      const uint dim = lane * ATT_DPL + e;
      if (attending && dim >= d0 && dim < min(D, d0 + ATT_SLICE))
        red[grp * ATT_SLICE + dim - d0] = acc_v[e] * w;
    }
    barrier();
    const uint dim = d0 + t;
    if (attending && dim < D) {
      VACC sum = VACC(0.0), val = VACC(0.0);
      for (uint r = 0; r < ATT_GROUPS; ++r) {
        sum += att_l[r];
        val += red[r * ATT_SLICE + t];
      }
      F32Buf(uint64_t(p.c) + 4ul * uint64_t(p.N)).v[h * D + dim] =
          sum > 0.0 ? float(val / sum) : 0.0;
    }
  }
  barrier();  // the shared arrays are read before another head of this workgroup reuses them
}

// After the block's stores (every invocation calls it): counts the block, and attends for each
// head whose counting it completes. blk: the block this workgroup stored (its rows lie in one
// head's q, k or v rows).
void attend_after_rows(uint tid, uint blk) {
  AttendRecord rec = AttendRecord(p.argmax_out);
  const uint hq = early_heads & 0xffffu, hkv = early_heads >> 16, G = hq / hkv, D = early_d;
  const uint first = blk * ROWS * RPT;
  const bool q_rows = first < hq * D;
  // The heads this block feeds: its query head, or its kv head's G query heads.
  const uint h0 = q_rows ? first / D : (first - hq * D) / D % hkv * G;
  const uint nh = q_rows ? 1u : G;
  const uint full = early_kv_arrivals + 1u;  // a head's k and v blocks, then its last q block
  memoryBarrierBuffer();  // this invocation's stores, before the counts below
  barrier();
  if (tid < nh) {
    const uint h = h0 + tid;
    bool attends = false;
    if (!q_rows) {
      attends = atomicAdd(rec.counters[hq + h], 1u) + 1u == full;
      if (attends) atomicAdd(rec.handoffs, 1u);
    } else if (atomicAdd(rec.counters[h], 1u) + 1u == early_q_arrivals) {
      atomicExchange(rec.counters[h], 0u);  // zero again for the next dispatch
      // The head's last q block: wait a while for its k and v blocks (no longer, and in one loop:
      // lavapipe, Mesa 22.3, ends a loop after 65,535 turns, and may not run them meanwhile).
      AttendPoll poll = AttendPoll(p.argmax_out + 4ul * uint64_t(ATTEND_COUNTERS_WORD + hq + h));
      for (uint i = 0; i < ATTEND_POLLS && poll.v < early_kv_arrivals; ++i) {
      }
      attends = atomicAdd(rec.counters[hq + h], 1u) + 1u == full;
    }
    if (attends) atomicExchange(rec.counters[hq + h], 0u);  // every count of the head is in
    attend_heads[tid] = attends ? 1u : 0u;
  }
  barrier();
  for (uint i = 0; i < nh; ++i) {
    if (attend_heads[i] != 0u) {  // the same for the whole workgroup
      memoryBarrierBuffer();  // the other blocks' stores, counted before, are visible
      attend_head(tid, rec, h0 + i);
    }
  }
}
