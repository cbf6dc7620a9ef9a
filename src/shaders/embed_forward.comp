// Embedding lookup: out[n, c] = weight[ids[n], c] over a flat [N * H] index. An id outside
// [0, V) gives a row of zeros (no fault, no read out of bounds); check_ids() reports such ids on
// the host.
//!novariant_base
//!variant i32 -DID_I64=0
//!variant i64 -DID_I64=1
#version 460
#include "common.glsl"
#include "token_ids.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

layout(push_constant, std430) uniform Push {
  F32Buf weight;  // [V, H]
  IdBuf ids;      // [N]
  F32Buf out_;    // [N, H]
  uint total;     // N * H
  uint hidden;    // H
  uint vocab;     // V
} p;

void main() {
  uint i = flat_invocation(LOCAL_SIZE);
  if (i >= p.total) return;
  uint n = i / p.hidden;
  uint c = i - n * p.hidden;
  uint row = row_of_id(p.ids, n, p.vocab);
  p.out_.v[i] = row == kInvalidRow ? 0.0 : p.weight.v[row * p.hidden + c];
}
