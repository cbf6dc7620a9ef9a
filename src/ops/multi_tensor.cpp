// Tensor lists of the multi-tensor kernels (see multi_tensor.h): the host mirror of
// shaders/multi_tensor.glsl's record, filled and written into device memory.
#include "ops/multi_tensor.h"

#include "vk/context.h"
#include "vk/error.h"

namespace vkf::ops::detail {
namespace {

// Mirrors TensorRecord in shaders/multi_tensor.glsl (std430: 64 bytes, 8-byte aligned members).
struct TensorRecord {
  uint64_t param, grad, exp_avg, exp_avg_sq;
  uint32_t n, first_chunk, scalar_index, aligned;
  float decay, bc2_sqrt, neg_step_size, pad;
};
static_assert(sizeof(TensorRecord) == 64, "TensorRecord must match multi_tensor.glsl");

uint64_t address_or_zero(const Tensor& t) {
  return t.defined() ? t.address() : 0;
}

}  // namespace

TensorTable make_tensor_table(const std::vector<MultiTensorEntry>& entries, const char* op) {
  TensorTable table;
  std::vector<TensorRecord> records;
  int64_t chunks = 0;
  for (const MultiTensorEntry& e : entries) {
    VKF_REQUIRE(e.grad.defined(), "{}: a tensor list entry has no gradient", op);
    const int64_t n = e.grad.numel();
    if (n == 0) continue;
    TensorRecord r{};
    r.param = address_or_zero(e.param);
    r.grad = e.grad.address();
    r.exp_avg = address_or_zero(e.exp_avg);
    r.exp_avg_sq = address_or_zero(e.exp_avg_sq);
    r.n = checked_u32(n, "element count");
    r.first_chunk = checked_u32(chunks, "chunk count of a tensor list");
    r.scalar_index = e.scalar_index;
    r.aligned = ((r.param | r.grad | r.exp_avg | r.exp_avg_sq) % 16 == 0) ? 1u : 0u;
    r.decay = e.decay;
    r.bc2_sqrt = e.bc2_sqrt;
    r.neg_step_size = e.neg_step_size;
    records.push_back(r);
    chunks += (n + kMultiChunk - 1) / kMultiChunk;
    table.reads.push_back(&e.grad);
    for (const Tensor* state : {&e.param, &e.exp_avg, &e.exp_avg_sq}) {
      if (!state->defined()) continue;
      table.reads.push_back(state);
      table.writes.push_back(state);
    }
  }
  table.count = checked_u32(static_cast<int64_t>(records.size()), "tensor count");
  table.chunks = checked_u32(chunks, "chunk count of a tensor list");
  if (records.empty()) return table;
  // I32 storage: the kernels read it through their own record type.
  const int64_t words = static_cast<int64_t>(records.size() * sizeof(TensorRecord) / 4);
  table.records = Tensor::empty({words}, DType::I32);
  vk::Context::get().stream().write_constants(records.data(), table.records.allocation(), 0,
                                              records.size() * sizeof(TensorRecord));
  table.reads.push_back(&table.records);
  return table;
}

}  // namespace vkf::ops::detail
