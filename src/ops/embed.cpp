// Embedding forward and backward (see embed.h; kernels embed_*.comp and scan_u32.comp).
//
// Backward, for N tokens and a V-row table, in O(V + N + sum of squared bucket sizes) work:
//   1. embed_bucket_count: counts[id] += 1 per valid token, not padding_idx (integer atomics);
//   2. scan_u32: offsets = exclusive prefix sums of counts ([V + 1], offsets[V] = valid tokens);
//   3. embed_bucket_place: each token position lands in its id's bucket (arbitrary order);
//   4. embed_bucket_rank: each bucket sorted by position (a position's slot = smaller positions);
//   5. embed_backward: per (row, column block), the bucket's dy rows summed in position order.
// Only step 5 touches [V, H] or [N, H] data; the sort works on 4-byte indices.
#include "ops/embed.h"

#include <string>

#include "core/autograd.h"
#include "core/launch.h"
#include "ops/token_ids.h"
#include "vk/error.h"

namespace vkf::ops {
namespace {

constexpr uint32_t kLocal = 256;
constexpr uint32_t kScanBlock = 1024;        // elements per workgroup in scan_u32 (256 x 4)
constexpr uint32_t kBackwardColumns = 256;   // columns per workgroup in embed_backward (64 x 4)

void check_ids_tensor(const Tensor& ids, const char* op) {
  VKF_REQUIRE(ids.defined(), "{}: ids tensor is undefined", op);
  VKF_REQUIRE(ids.dtype() == DType::I32 || ids.dtype() == DType::I64,
              "{}: ids must be i32 or i64, got {} of shape {}", op, dtype_name(ids.dtype()),
              shape_str(ids.shape()));
}

// `f16_ok`: the forward also reads a table stored in f16 (inference weights).
void check_weight(const Tensor& weight, const char* op, const char* what, bool f16_ok = false) {
  VKF_REQUIRE(weight.defined(), "{}: {} is undefined", op, what);
  VKF_REQUIRE(weight.dtype() == DType::F32 || (f16_ok && weight.dtype() == DType::F16),
              "{}: {} must be f32{}, got {}", op, what, f16_ok ? " or f16" : "",
              dtype_name(weight.dtype()));
  VKF_REQUIRE(weight.rank() == 2 && weight.dim(0) >= 1 && weight.dim(1) >= 1,
              "{}: {} must be [V, H] with V, H >= 1, got shape {}", op, what,
              shape_str(weight.shape()));
  checked_u32(weight.numel(), "embedding table element count");
}

// The row that gets no gradient (kNoRow for none), after torch's checks and normalization.
constexpr uint32_t kNoRow = 0xffffffffu;
uint32_t padding_row(std::optional<int64_t> padding_idx, int64_t vocab, const char* op) {
  if (!padding_idx) return kNoRow;
  const int64_t p = *padding_idx;
  VKF_REQUIRE(p >= -vocab && p < vocab, "{}: padding_idx {} is outside [-{}, {})", op, p, vocab,
              vocab);
  return static_cast<uint32_t>(p < 0 ? p + vocab : p);
}

// offsets[0..n] = exclusive prefix sums of counts[0..n), offsets[n] = the total.
void exclusive_scan_u32(const Tensor& counts, const Tensor& offsets, int64_t n) {
  const int64_t blocks = (n + kScanBlock - 1) / kScanBlock;
  Tensor block_sums = Tensor::empty({blocks}, DType::I32);
  Tensor total = offsets.slice(0, n, n + 1);
  struct {
    uint64_t in, out, block_sums;
    uint32_t n;
  } blocks_push{counts.address(), offsets.address(), block_sums.address(),
                static_cast<uint32_t>(n)};
  launch("scan_u32_blocks", blocks_push, grid_1d(n, kScanBlock), {&counts}, {&offsets, &block_sums});
  struct {
    uint64_t block_sums, total;
    uint32_t n_blocks;
  } sums_push{block_sums.address(), total.address(), static_cast<uint32_t>(blocks)};
  launch("scan_u32_sums", sums_push, Grid{1, 1, 1}, {&block_sums}, {&block_sums, &total});
  if (blocks == 1) return;
  struct {
    uint64_t out, block_sums;
    uint32_t n;
  } add_push{offsets.address(), block_sums.address(), static_cast<uint32_t>(n)};
  launch("scan_u32_add", add_push, grid_1d(n, kLocal), {&offsets, &block_sums}, {&offsets});
}

}  // namespace

void check_ids(const std::vector<int64_t>& ids, int64_t vocab, const char* where) {
  for (size_t i = 0; i < ids.size(); ++i) {
    VKF_REQUIRE(ids[i] >= 0 && ids[i] < vocab,
                "{}: token id {} at position {} is outside the vocabulary [0, {})", where, ids[i],
                i, vocab);
  }
}

Tensor embedding(const Tensor& weight, const Tensor& ids, std::optional<int64_t> padding_idx) {
  check_weight(weight, "embedding", "weight", true);
  check_ids_tensor(ids, "embedding");
  padding_row(padding_idx, weight.dim(0), "embedding");
  const Tensor w = weight.is_contiguous() ? weight : weight.contiguous();
  const Tensor idc = ids.is_contiguous() ? ids : ids.contiguous();
  const int64_t vocab = w.dim(0), hidden = w.dim(1), n = idc.numel();
  Shape out_shape = idc.shape();
  out_shape.push_back(hidden);
  Tensor out = Tensor::empty(out_shape, DType::F32);
  const int64_t total = n * hidden;
  if (total > 0) {
    struct {
      uint64_t weight, ids, out;
      uint32_t total, hidden, vocab;
    } push{w.address(), idc.address(), out.address(), checked_u32(total, "embedding output size"),
           static_cast<uint32_t>(hidden), static_cast<uint32_t>(vocab)};
    const bool f16 = w.dtype() == DType::F16;
    launch(std::string("embed_forward_") + detail::id_variant(idc.dtype()) + (f16 ? "_f16" : ""),
           push, grid_1d(total, kLocal), {&w, &idc}, {&out}, {},
           {0.0, (f16 ? 6.0 : 8.0) * static_cast<double>(total)});
  }
  autograd::record_op("embedding", {w}, {out}, [idc, padding_idx](autograd::GradContext& ctx) {
    const Tensor& g = ctx.grad_output(0);
    if (!g.defined() || !ctx.needs_grad(0)) return;
    autograd::GradTarget target = ctx.grad_target(0);
    embedding_backward(idc, g, target.tensor, target.accumulate, padding_idx);
  });
  return out;
}

void embedding_backward(const Tensor& ids, const Tensor& grad_out, const Tensor& grad_weight,
                        bool accumulate, std::optional<int64_t> padding_idx) {
  const char* op = "embedding_backward";
  check_ids_tensor(ids, op);
  check_weight(grad_weight, op, "grad_weight");
  VKF_REQUIRE(grad_weight.is_contiguous(), "{}: grad_weight must be contiguous (shape {})", op,
              shape_str(grad_weight.shape()));
  VKF_REQUIRE(grad_out.defined(), "{}: grad_out is undefined", op);
  VKF_REQUIRE(grad_out.dtype() == DType::F32, "{}: grad_out must be f32, got {}", op,
              dtype_name(grad_out.dtype()));
  const int64_t vocab = grad_weight.dim(0), hidden = grad_weight.dim(1), n = ids.numel();
  Shape expect = ids.shape();
  expect.push_back(hidden);
  VKF_REQUIRE(grad_out.shape() == expect,
              "{}: grad_out must have shape {} (ids {} plus H = {}), got {}", op,
              shape_str(expect), shape_str(ids.shape()), hidden, shape_str(grad_out.shape()));
  checked_u32(n * hidden, "embedding gradient size");
  checked_u32(vocab + 1, "vocabulary size");
  const uint32_t skip_row = padding_row(padding_idx, vocab, op);

  if (n == 0) {
    if (!accumulate) grad_weight.fill_(0.0f);
    return;
  }
  const Tensor idc = ids.is_contiguous() ? ids : ids.contiguous();
  const Tensor dy = grad_out.is_contiguous() ? grad_out : grad_out.contiguous();
  const uint32_t n32 = static_cast<uint32_t>(n), v32 = static_cast<uint32_t>(vocab);

  // [V] per-id counts, [V + 1] bucket offsets, [N] row of each token, [N] positions by bucket.
  Tensor counts = Tensor::zeros({vocab}, DType::I32);
  Tensor offsets = Tensor::empty({vocab + 1}, DType::I32);
  Tensor rows = Tensor::empty({n}, DType::I32);
  Tensor unsorted = Tensor::empty({n}, DType::I32);
  Tensor sorted = Tensor::empty({n}, DType::I32);

  struct {
    uint64_t ids, rows, counts;
    uint32_t n, vocab, skip_row;
  } count_push{idc.address(), rows.address(), counts.address(), n32, v32, skip_row};
  launch(std::string("embed_bucket_count_") + detail::id_variant(idc.dtype()), count_push,
         grid_1d(n, kLocal), {&idc, &counts}, {&rows, &counts});

  exclusive_scan_u32(counts, offsets, vocab);

  struct {
    uint64_t rows, offsets, counts, unsorted;
    uint32_t n;
  } place_push{rows.address(), offsets.address(), counts.address(), unsorted.address(), n32};
  launch("embed_bucket_place", place_push, grid_1d(n, kLocal), {&rows, &offsets, &counts},
         {&counts, &unsorted});

  struct {
    uint64_t rows, offsets, unsorted, sorted;
    uint32_t n, vocab;
  } rank_push{rows.address(), offsets.address(), unsorted.address(), sorted.address(), n32, v32};
  launch("embed_bucket_rank", rank_push, grid_1d(n, kLocal), {&rows, &offsets, &unsorted},
         {&sorted});

  const int64_t col_blocks = (hidden + kBackwardColumns - 1) / kBackwardColumns;
  struct {
    uint64_t dy, offsets, sorted, grad;
    uint32_t vocab, hidden, col_blocks, accumulate;
  } sum_push{dy.address(),    offsets.address(),
             sorted.address(), grad_weight.address(),
             v32,             static_cast<uint32_t>(hidden),
             static_cast<uint32_t>(col_blocks), accumulate ? 1u : 0u};
  const double dy_elems = static_cast<double>(n * hidden);
  const double w_elems = static_cast<double>(vocab * hidden);
  launch("embed_backward", sum_push, grid_1d(checked_u32(vocab * col_blocks, "workgroups"), 1),
         {&dy, &offsets, &sorted, &grad_weight}, {&grad_weight}, {},
         {dy_elems, 4.0 * dy_elems + (accumulate ? 8.0 : 4.0) * w_elems});
}

}  // namespace vkf::ops
