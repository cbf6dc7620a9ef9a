// Tensor lists for kernels that cover many tensors in one dispatch (multi-tensor AdamW and the
// gradient norms of a training step): where one dispatch per tensor would cost a launch per
// parameter -- 272 for the 135M model, three times over in a mixed-precision step -- the host
// writes one record per tensor (its addresses, size and first chunk) into device memory and one
// dispatch walks every tensor's chunks. The records go in through the command buffer
// (vk::Stream::write_constants), so a captured step replays them unchanged and no upload sits in
// the step. Kernels share the record layout through shaders/multi_tensor.glsl.
#pragma once

#include <cstdint>
#include <vector>

#include "core/launch.h"
#include "core/tensor.h"

namespace vkf::ops::detail {

// Elements per chunk (one workgroup each); the chunking of the per-tensor norm kernels, so a
// norm's partial sums are the same numbers either way.
constexpr int64_t kMultiChunk = 4096;

// One tensor of a list. Only `grad` is needed for a gradient-only list (norms); an AdamW list
// fills all four (each contiguous f32 of grad's size) and the step scalars.
struct MultiTensorEntry {
  Tensor param, grad, exp_avg, exp_avg_sq;
  uint32_t scalar_index = 0;
  float decay = 1.0f, bc2_sqrt = 1.0f, neg_step_size = 0.0f;
};

struct TensorTable {
  Tensor records;       // the records in device memory (kept alive by the caller until launched)
  uint32_t count = 0;   // records (tensors with at least one element)
  uint32_t chunks = 0;  // chunks over all of them: the dispatch's workgroups
  std::vector<const Tensor*> reads,
      writes;  // for launch_lists: grads (and state) read, state written
};

// Builds the table in device memory. Entries without elements are left out. `entries` must
// outlive the returned table's reads/writes pointers.
TensorTable make_tensor_table(const std::vector<MultiTensorEntry>& entries, const char* op);

}  // namespace vkf::ops::detail
