// The tensor list of a multi-tensor kernel (ops/multi_tensor.h): one 64-byte record per tensor,
// written into device memory by the host (baked into the command buffer, so a captured step
// replays it unchanged). Every tensor is cut into chunks of MULTI_CHUNK elements, numbered
// across the list in order; workgroup g takes chunk g and finds its tensor by a binary search
// over the records' first chunks (uniform across the workgroup, so the loads are broadcasts that
// stay in cache).
#define MULTI_CHUNK 4096u

struct TensorRecord {
  uint64_t param;        // AdamW's parameter (0 in a gradient-only list)
  uint64_t grad;
  uint64_t exp_avg;
  uint64_t exp_avg_sq;
  uint n;                // elements
  uint first_chunk;      // chunks of the tensors before it
  uint scalar_index;     // AdamW: the entry of the device step-scalar table
  uint aligned;          // 1: every address above is 16-byte aligned (vec4 loads allowed)
  float decay;           // AdamW's step scalars when no device table is given
  float bc2_sqrt;
  float neg_step_size;
  float pad;
};
layout(buffer_reference, std430, buffer_reference_align = 16) buffer TensorRecords {
  TensorRecord r[];
};

// The record holding chunk g: the last one whose first chunk is <= g (records are in chunk order
// and the first starts at chunk 0; tensors without elements own no chunk and are never found).
uint record_of_chunk(TensorRecords table, uint count, uint g) {
  uint lo = 0u, hi = count - 1u;
  while (lo < hi) {
    uint mid = (lo + hi + 1u) >> 1;
    if (table.r[mid].first_chunk <= g) lo = mid;
    else hi = mid - 1u;
  }
  return lo;
}
