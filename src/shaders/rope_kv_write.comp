// One decode step's rotary embedding and KV-cache append in a single dispatch: q_out = rope(q),
// cache_k[b, slot] = rope(k[b, 0]) and cache_v[b, slot] = v[b, 0], slot = slot_buf[0] read on
// the device (as kv_cache_write.comp), so a recorded step serves every position. The rotation is
// rope_apply.comp's (transformers' q * cos + rotate_half(q) * sin; pairs (j, j + half), or
// (2j, 2j + 1) interleaved; dims past rotary_dim pass through), at each row's position
// pos[b] (clamped into the table). Layouts: q, q_out [B, 1, Hq, D]; k, v [B, 1, Hkv, D]; caches
// [B, capacity, Hkv, D]; tables [P, half]; all contiguous f32. One thread per rotated pair or
// passed-through element of q and k, and per element of v. The pair arithmetic is rope_pair.glsl's,
// which attention_decode_fast.comp shares (it rotates the same key for itself, bit for bit).
#version 460
#include "common.glsl"
#include "rope_pair.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

#define INTERLEAVED 1u

layout(push_constant, std430) uniform Push {
  F32Buf q;
  F32Buf k;
  F32Buf v;
  F32Buf cos_;
  F32Buf sin_;
  I32Buf pos;     // [B]
  I32Buf slot;    // slot[0]: the cache position written
  F32Buf q_out;
  F32Buf cache_k;
  F32Buf cache_v;
  uint hq, hkv, D;
  uint half_;     // rotary_dim / 2
  uint P;         // table rows
  uint capacity;
  uint batch;
  uint flags;
} p;

// Rotates element c of head row `row` (b, head) of x into out (offsets in elements).
void rotate(F32Buf x, uint xbase, F32Buf out_, uint obase, uint b, uint c) {
  const uint rotary = 2u * p.half_;
  if (c >= p.half_) {
    const uint i = rotary + (c - p.half_);
    out_.v[obase + i] = x.v[xbase + i];
    return;
  }
  const uint pos = uint(clamp(p.pos.v[b], 0, int(p.P) - 1));
  const float cs = p.cos_.v[pos * p.half_ + c];
  const float sn = p.sin_.v[pos * p.half_ + c];
  const bool interleaved = (p.flags & INTERLEAVED) != 0u;
  const uint i0 = interleaved ? 2u * c : c;
  const uint i1 = i0 + (interleaved ? 1u : p.half_);
  const float a = x.v[xbase + i0];
  const float bv = x.v[xbase + i1];
  out_.v[obase + i0] = rope_first(a, bv, cs, sn);
  out_.v[obase + i1] = rope_second(a, bv, cs, sn);
}

void main() {
  const uint i = flat_invocation(LOCAL_SIZE);
  const uint per_row = p.half_ + (p.D - 2u * p.half_);  // work items per head row
  const uint q_items = p.batch * p.hq * per_row, k_items = p.batch * p.hkv * per_row;
  const int s = p.slot.v[0];
  const bool slot_ok = s >= 0 && uint(s) < p.capacity;
  if (i < q_items) {
    const uint row = i / per_row, c = i - row * per_row;  // row = b * hq + head
    rotate(p.q, row * p.D, p.q_out, row * p.D, row / p.hq, c);
  } else if (i < q_items + k_items) {
    const uint e = i - q_items;
    const uint row = e / per_row, c = e - row * per_row;  // row = b * hkv + head
    const uint b = row / p.hkv, head = row - b * p.hkv;
    if (slot_ok) rotate(p.k, row * p.D, p.cache_k, ((b * p.capacity + uint(s)) * p.hkv + head) * p.D, b, c);
  } else if (i < q_items + k_items + p.batch * p.hkv * p.D) {
    const uint e = i - q_items - k_items;
    const uint b = e / (p.hkv * p.D), c = e - b * (p.hkv * p.D);
    if (slot_ok) p.cache_v.v[(b * p.capacity + uint(s)) * p.hkv * p.D + c] = p.v.v[e];
  }
}
