// Attention backward preprocessing: delta[b, h, i] = do_i . o_i, the row sum of p * dp that the
// softmax backward subtracts (sum_j p_ij (do_i . v_j) = do_i . o_i). One thread per row, summing
// over the head dim in order.
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
} p;

void main() {
  uint row = flat_invocation(LOCAL_SIZE);
  if (row >= p.rows) return;
  uint i = row % p.tq;
  uint h = (row / p.tq) % p.hq;
  uint b = row / (p.tq * p.hq);
  uint base = ((b * p.tq + i) * p.hq + h) * p.d;
  VACC s = VACC(0.0);
  for (uint d = 0; d < p.d; ++d) s += VACC(p.dout.v[base + d]) * VACC(p.o.v[base + d]);
  p.delta.v[row] = float(s);
}
