// Embedding backward, step 4: puts each bucket in increasing position order, which fixes the
// order in which a row's gradients are summed (determinism). A position's final slot is the
// number of smaller positions in its bucket; positions are distinct, so the slots are too. Work is
// the sum of squared bucket sizes, spread over one thread per token: cheap for text, and still
// fast on a GPU when one id (padding) fills the whole batch.
#version 460
#include "common.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

layout(push_constant, std430) uniform Push {
  U32Buf rows;      // [N]
  U32Buf offsets;   // [V + 1]
  U32Buf unsorted;  // [N]
  U32Buf sorted;    // [N] out
  uint n;
  uint vocab;
} p;

void main() {
  uint j = flat_invocation(LOCAL_SIZE);
  if (j >= p.n || j >= p.offsets.v[p.vocab]) return;  // slots past the valid-token total are unused
  uint pos = p.unsorted.v[j];
  uint row = p.rows.v[pos];
  uint lo = p.offsets.v[row];
  uint hi = p.offsets.v[row + 1u];
  uint rank = 0u;
  for (uint k = lo; k < hi; ++k) rank += p.unsorted.v[k] < pos ? 1u : 0u;
  p.sorted.v[lo + rank] = pos;
}
