// Row-wise argmax of an fp32 matrix, as torch.argmax: the first index of the largest value, NaN
// counting as larger than any number. Greedy decoding chooses its tokens with it on the device,
// so only one int32 per row comes back to the host instead of the row of logits. One workgroup
// per row: each thread scans a strided share of the row in increasing index, then a fixed tree
// keeps the better (value, index) pair, so the result is exact and deterministic.
// Grid: x = rows.
#version 460
#include "common.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

layout(push_constant, std430) uniform Push {
  F32Buf x;          // row r starts at element r * row_stride
  I32Buf out_;       // out_[r * out_stride] = the index chosen in row r
  uint cols;         // row length, >= 1
  uint row_stride;
  uint out_stride;
} p;

const uint NONE = 0xffffffffu;  // no element seen yet

shared float best_value[LOCAL_SIZE];
shared uint best_index[LOCAL_SIZE];

// Whether (a, ia) wins over (b, ib) under torch.argmax's order.
bool better(float a, uint ia, float b, uint ib) {
  if (ib == NONE) return ia != NONE;
  if (ia == NONE) return false;
  const bool an = isnan(a), bn = isnan(b);
  if (an != bn) return an;
  if (!an && a != b) return a > b;
  return ia < ib;
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint base = gl_WorkGroupID.x * p.row_stride;
  float bv = 0.0;
  uint bi = NONE;
  for (uint i = tid; i < p.cols; i += LOCAL_SIZE) {
    const float v = p.x.v[base + i];
    if (better(v, i, bv, bi)) {
      bv = v;
      bi = i;
    }
  }
  best_value[tid] = bv;
  best_index[tid] = bi;
  barrier();
  for (uint s = LOCAL_SIZE / 2; s > 0; s /= 2) {
    if (tid < s && better(best_value[tid + s], best_index[tid + s], best_value[tid], best_index[tid])) {
      best_value[tid] = best_value[tid + s];
      best_index[tid] = best_index[tid + s];
    }
    barrier();
  }
  if (tid == 0) p.out_.v[gl_WorkGroupID.x * p.out_stride] = int(best_index[0]);
}
