// Embedding lookup: out[n, c] = weight[ids[n], c] over a flat [N * H] index. An id outside
// [0, V) gives a row of zeros (no fault, no read out of bounds); check_ids() reports such ids on
// the host. The _f16 variants read a table stored in f16 (inference weights), widened exactly.
//!novariant_base
//!variant i32 -DID_I64=0
//!variant i64 -DID_I64=1
//!variant i32_f16 -DID_I64=0 -DWEIGHT_F16=1
//!variant i64_f16 -DID_I64=1 -DWEIGHT_F16=1
#version 460
#include "common.glsl"
#include "token_ids.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

layout(push_constant, std430) uniform Push {
#if defined(WEIGHT_F16)
  U16Buf weight;  // [V, H] halves
#else
  F32Buf weight;  // [V, H]
#endif
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
  if (row == kInvalidRow) {
    p.out_.v[i] = 0.0;
    return;
  }
#if defined(WEIGHT_F16)
  p.out_.v[i] = unpackHalf2x16(uint(p.weight.v[row * p.hidden + c])).x;
#else
  p.out_.v[i] = p.weight.v[row * p.hidden + c];
#endif
}
