// Attention backward preprocessing: delta[b, h, i] = do_i . o_i, the row sum of p * dp that the
// softmax backward subtracts (sum_j p_ij (do_i . v_j) = do_i . o_i). One thread per row, summing
// over the head dim in order. Threads take rows in memory order ([B, Tq, Hq] of dout and o), so
// that a subgroup reads neighbouring rows, with 16-byte loads where the host allows (VEC4: head
// dim a multiple of 4, both operands 16-byte aligned; the same products added in the same order).
//!precise
#version 460
#include "common.glsl"
#include "precise_math.glsl"
#define LOCAL_SIZE 128
layout(local_size_x = LOCAL_SIZE) in;

layout(push_constant, std430) uniform Push {
  F32Buf dout;   // [B, Tq, Hq, D]
  F32Buf o;      // [B, Tq, Hq, D]
  F32Buf delta;  // [B, Hq, Tq]
  uint rows;     // B * Hq * Tq
  uint tq;
  uint hq;
  uint d;
  uint vec4_rows;  // 1: VEC4 (see above)
} p;

void main() {
  const uint row = flat_invocation(LOCAL_SIZE);  // (b, i, h), h fastest: memory order
  if (row >= p.rows) return;
  const uint h = row % p.hq;
  const uint i = (row / p.hq) % p.tq;
  const uint b = row / (p.tq * p.hq);
  const uint base = row * p.d;
  VACC s = VACC(0.0);
  if (p.vec4_rows != 0u) {
    Vec4Buf dout4 = Vec4Buf(uint64_t(p.dout)), o4 = Vec4Buf(uint64_t(p.o));
    for (uint c = 0; c < p.d / 4u; ++c) {
      const vec4 x = dout4.v[base / 4u + c], y = o4.v[base / 4u + c];
      s += VACC(x.x) * VACC(y.x);
      s += VACC(x.y) * VACC(y.y);
      s += VACC(x.z) * VACC(y.z);
      s += VACC(x.w) * VACC(y.w);
    }
  } else {
    for (uint d = 0; d < p.d; ++d) s += VACC(p.dout.v[base + d]) * VACC(p.o.v[base + d]);
  }
  p.delta.v[(b * p.hq + h) * p.tq + i] = float(s);
}
