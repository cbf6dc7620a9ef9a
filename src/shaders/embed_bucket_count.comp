// Embedding backward, step 1 of the counting sort of token positions by id: rows[n] = the id of
// token n as a row index (kInvalidRow when outside [0, V) or equal to padding_idx: such tokens
// give no gradient), and counts[row] += 1. Integer atomics: the counts do not depend on the order of the additions.
//!novariant_base
//!variant i32 -DID_I64=0
//!variant i64 -DID_I64=1
#version 460
#include "common.glsl"
#include "token_ids.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

layout(push_constant, std430) uniform Push {
  IdBuf ids;      // [N]
  U32Buf rows;    // [N] out
  U32Buf counts;  // [V], zeroed by the host
  uint n;
  uint vocab;
  uint skip_row;  // padding_idx, or kInvalidRow for none
} p;

void main() {
  uint i = flat_invocation(LOCAL_SIZE);
  if (i >= p.n) return;
  uint row = row_of_id(p.ids, i, p.vocab);
  if (row == p.skip_row) row = kInvalidRow;
  p.rows.v[i] = row;
  if (row != kInvalidRow) atomicAdd(p.counts.v[row], 1u);
}
