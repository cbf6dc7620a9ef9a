// Attention backward preprocessing: delta[b, h, i] = do_i . o_i, the row sum of p * dp that the
// softmax backward subtracts (sum_j p_ij (do_i . v_j) = do_i . o_i).
//
// LANES = 16 consecutive invocations share a row, so that a subgroup's loads cover whole rows of
// neighbouring memory (rows in memory order: [B, Tq, Hq] of dout and o). Lane l sums the chunks
// l, l + LANES, ... of the row in that order -- vec4 chunks where the host allows (VEC4: head dim a
// multiple of 4, both operands 16-byte aligned; each chunk's four products added x, y, z, w),
// else single elements -- and lane 0 adds the 16 partial sums in lane order: a fixed order, so the
// result is deterministic. (One invocation per row, reading its row alone, ran at about 1 TB/s on an
// H100: each load instruction of a subgroup touched 32 rows.)
//!precise
#version 460
#include "common.glsl"
#include "precise_math.glsl"
#define LOCAL_SIZE 128
#define LANES 16
#define ROWS_PER_GROUP (LOCAL_SIZE / LANES)
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

shared VACC partial[LOCAL_SIZE];

void main() {
  const uint t = gl_LocalInvocationID.x, lane = t % LANES;
  const uint row = flat_group() * ROWS_PER_GROUP + t / LANES;  // (b, i, h), h fastest
  VACC s = VACC(0.0);
  if (row < p.rows) {
    const uint base = row * p.d;
    if (p.vec4_rows != 0u) {
      Vec4Buf dout4 = Vec4Buf(uint64_t(p.dout)), o4 = Vec4Buf(uint64_t(p.o));
      for (uint c = lane; c < p.d / 4u; c += LANES) {
        const vec4 x = dout4.v[base / 4u + c], y = o4.v[base / 4u + c];
        s += VACC(x.x) * VACC(y.x);
        s += VACC(x.y) * VACC(y.y);
        s += VACC(x.z) * VACC(y.z);
        s += VACC(x.w) * VACC(y.w);
      }
    } else {
      for (uint d = lane; d < p.d; d += LANES)
        s += VACC(p.dout.v[base + d]) * VACC(p.o.v[base + d]);
    }
  }
  partial[t] = s;
  barrier();
  if (lane != 0u || row >= p.rows) return;
  VACC sum = partial[t];
  for (uint l = 1u; l < LANES; ++l) sum += partial[t + l];
  const uint h = row % p.hq;
  const uint i = (row / p.hq) % p.tq;
  const uint b = row / (p.tq * p.hq);
  p.delta.v[(b * p.hq + h) * p.tq + i] = float(sum);
}
