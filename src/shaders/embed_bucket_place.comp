// Embedding backward, step 3: drops each token position into its id's bucket
// [offsets[row], offsets[row + 1]). The slot within the bucket comes from an atomic countdown of
// counts[row], so the order inside a bucket is arbitrary here; embed_bucket_rank fixes it.
#version 460
#include "common.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

const uint kInvalidRow = 0xffffffffu;

layout(push_constant, std430) uniform Push {
  U32Buf rows;      // [N]
  U32Buf offsets;   // [V + 1], exclusive prefix sums of the counts
  U32Buf counts;    // [V], counted down to 0 here
  U32Buf unsorted;  // [N] out: positions grouped by id, any order within a group
  uint n;
} p;

void main() {
  uint i = flat_invocation(LOCAL_SIZE);
  if (i >= p.n) return;
  uint row = p.rows.v[i];
  if (row == kInvalidRow) return;
  uint remaining = atomicAdd(p.counts.v[row], 0xffffffffu);  // returns the count before the -1
  p.unsorted.v[p.offsets.v[row] + remaining - 1u] = i;
}
