// Rotary embedding over x [B, T, heads, D] (contiguous): one thread per rotated pair, and one per
// pass-through element past rotary_dim. The pair's angle comes from the cos/sin tables
// [P, rotary_dim / 2] at the token's position (clamped into the table). sin_sign = -1 applies
// the inverse rotation, which is the backward pass. With ACCUMULATE the result is added to out.
// The precise build evaluates each output (rotation and accumulation) in double and rounds once.
//!precise
#version 460
#include "common.glsl"
#include "precise_math.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

#define INTERLEAVED 1u
#define ACCUMULATE 2u

layout(push_constant, std430) uniform Push {
  F32Buf x;    // [B, T, heads, D]
  F32Buf cos_;  // [P, half]
  F32Buf sin_;  // [P, half]
  I32Buf pos;  // [B or 1, T]
  F32Buf out_;  // [B, T, heads, D]
  uint items;  // B * T * heads * (half + D - rotary_dim)
  uint T;
  uint heads;
  uint D;
  uint half_;  // rotary_dim / 2
  uint P;
  uint pos_batch_stride;  // T, or 0 when one row of ids serves the whole batch
  uint flags;
  float sin_sign;
} p;

void store(uint i, VACC v) {
  p.out_.v[i] = float((p.flags & ACCUMULATE) != 0u ? VACC(p.out_.v[i]) + v : v);
}

void main() {
  const uint k = flat_invocation(LOCAL_SIZE);
  if (k >= p.items) return;
  const uint rotary = 2u * p.half_;
  const uint per_row = p.half_ + (p.D - rotary);
  const uint row = k / per_row;  // (b, t, head)
  const uint c = k - row * per_row;
  const uint base = row * p.D;
  if (c >= p.half_) {
    const uint i = base + rotary + (c - p.half_);
    store(i, VACC(p.x.v[i]));
    return;
  }
  const uint bt = row / p.heads;
  const uint b = bt / p.T;
  const uint t = bt - b * p.T;
  const int raw = p.pos.v[b * p.pos_batch_stride + t];
  const uint pos = uint(clamp(raw, 0, int(p.P) - 1));
  const VACC cs = VACC(p.cos_.v[pos * p.half_ + c]);
  const VACC sn = VACC(p.sin_sign * p.sin_.v[pos * p.half_ + c]);
  const bool interleaved = (p.flags & INTERLEAVED) != 0u;
  const uint i0 = base + (interleaved ? 2u * c : c);
  const uint i1 = i0 + (interleaved ? 1u : p.half_);
  const VACC a = VACC(p.x.v[i0]);
  const VACC bv = VACC(p.x.v[i1]);
  // transformers: q * cos + rotate_half(q) * sin, rotate_half(q) = (-second, first).
  store(i0, a * cs - bv * sn);
  store(i1, bv * cs + a * sn);
}
