// Cross-entropy fused with the LM head (see linear_cross_entropy.h). Per chunk of rows:
//   z = h_c·Wᵀ into a [chunk, V] buffer (ops::matmul_into, so the fast GEMM kernels and the
//   mixed-precision mode apply; on the fp32 tiled kernel from one copy of Wᵀ in that kernel's
//   fast layout, made for all chunks: [H, V] f32 more while the op runs, 1 GiB for
//   Llama-3.2-1B's head); linear_ce_rows.comp turns each row into its loss and, when
//   gradients are recorded, overwrites it with d(row loss)/dz; then dh_c = dz·W and
//   dW (+)= dzᵀ·h_c (matmul_into with beta = 1 after the first chunk). ce_reduce.comp sums the
//   row losses once at the end, so loss_sum does not depend on the chunking.
//
// Gradients are made in the forward, not by recomputing the chunk logits in the backward. The
// loss is a scalar, so its input gradients for an incoming gradient g are g times those for 1:
// the forward computes those (dh [N, H] and dW [V, H], f32) and the backward only scales them
// (scale_by_device_scalar_) and hands them to the tape without a copy (add_grad_owned).
//   FLOPs: three products of 2·N·V·H each (z, dh, dW), as the unfused head's forward + backward;
//     recomputing would add a fourth (for Llama-3.2-1B at 8 x 1024 tokens, 4.3 TFLOP more per
//     step: about 7% of the step's matmul work, ~95 ms at 45 TFLOP/s in fp32).
//   Bytes: dW is the head weight's gradient, which exists from the start of the backward either
//     way; made here it exists from the end of the forward, which is the same moment of the step.
//     dh adds N·H f32 (64 MiB at that shape) to the saved tensors. Only with gradient
//     accumulation (the weight's gradient already holding earlier micro-batches) is dW a second
//     [V, H] until the backward adds it in; recomputation could accumulate into it directly.
//   Either way each chunk's product reads and writes dW once (2·V·H·4 bytes per chunk: 16 chunks
//     of 512 rows at that shape move 32 GB, ~7.5 ms at 4.3 TB/s); a larger chunk budget means
//     fewer passes.
// Without a tape (evaluation) only z and the row losses are computed: one product per chunk.
#include "ops/linear_cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "core/autograd.h"
#include "core/launch.h"
#include "ops/matmul.h"
#include "ops/matmul_kernels.h"
#include "ops/matmul_relayout.h"
#include "ops/reduce.h"
#include "ops/token_ids.h"
#include "vk/context.h"
#include "vk/error.h"

namespace vkf::ops {
namespace {

// The default chunk budget: a 64th of the device's memory, within 256 MiB .. 1 GiB. Larger chunks
// mean fewer, taller products and fewer passes over dW: on an H100 (80 GB, so 1 GiB) the 1B fp32
// step took 1,506.1 ms against 1,511.0 with 256 MiB, for +0.98 GiB of peak (bench/RESULTS.md,
// thirty-seventh session); small devices keep 256 MiB.
constexpr uint64_t kMinDefaultChunkBytes = uint64_t{256} << 20;
constexpr uint64_t kMaxDefaultChunkBytes = uint64_t{1} << 30;
uint64_t g_chunk_bytes = 0;  // 0: default_chunk_bytes()
int64_t g_group_chunks = 0;  // 0: the rule of linear_cross_entropy_group_chunks

// Read from the current device each time (as fast_stored_ds_max_bytes does), not cached, so a
// process that opens another device gets that device's budget.
uint64_t default_chunk_bytes() {
  return std::clamp(vk::Context::get().info().device_local_bytes() / 64, kMinDefaultChunkBytes,
                    kMaxDefaultChunkBytes);
}

void check_inputs(const Tensor& hidden, const Tensor& weight, const Tensor& labels,
                  const LinearCrossEntropyOptions& o) {
  const char* op = "linear_cross_entropy";
  VKF_REQUIRE(hidden.defined() && weight.defined() && labels.defined(),
              "{}: hidden, weight and labels must all be defined tensors", op);
  VKF_REQUIRE(hidden.dtype() == DType::F32 && weight.dtype() == DType::F32,
              "{}: hidden and weight must be f32, got {} and {}", op, dtype_name(hidden.dtype()),
              dtype_name(weight.dtype()));
  VKF_REQUIRE(hidden.rank() == 2 && hidden.dim(1) >= 1,
              "{}: hidden must be [N, H] with H >= 1, got shape {}", op, shape_str(hidden.shape()));
  VKF_REQUIRE(weight.rank() == 2 && weight.dim(0) >= 1 && weight.dim(1) == hidden.dim(1),
              "{}: weight must be [V, H] = [vocab, {}] (the head's [out, in] layout) to match "
              "hidden {}, got shape {}",
              op, hidden.dim(1), shape_str(hidden.shape()), shape_str(weight.shape()));
  VKF_REQUIRE(labels.dtype() == DType::I32 || labels.dtype() == DType::I64,
              "{}: labels must be i32 or i64, got {}", op, dtype_name(labels.dtype()));
  VKF_REQUIRE(labels.rank() == 1 && labels.dim(0) == hidden.dim(0),
              "{}: labels must be [N] = [{}] to match hidden {}, got shape {}", op, hidden.dim(0),
              shape_str(hidden.shape()), shape_str(labels.shape()));
  VKF_REQUIRE(std::isfinite(o.logit_scale) && o.logit_scale != 0.0f,
              "{}: logit_scale must be a finite non-zero number, got {}", op, o.logit_scale);
  VKF_REQUIRE(std::isfinite(o.softcap) && o.softcap >= 0.0f,
              "{}: softcap must be 0 (none) or a positive number, got {}", op, o.softcap);
  VKF_REQUIRE(o.chunk_rows >= 0, "{}: chunk_rows must be >= 0 (0: automatic), got {}", op,
              o.chunk_rows);
  VKF_REQUIRE(o.group_chunks >= 0, "{}: group_chunks must be >= 0 (0: automatic), got {}", op,
              o.group_chunks);
  checked_u32(hidden.numel(), "linear_cross_entropy hidden element count");
  checked_u32(weight.numel(), "linear_cross_entropy weight element count");
  checked_u32(2 * hidden.dim(0), "linear_cross_entropy row count");
}

// Input gradients for an incoming gradient of 1, made in the forward; moved out by the backward.
struct PendingGrads {
  Tensor dh, dw;
};

}  // namespace

void set_linear_cross_entropy_chunk_bytes(uint64_t bytes) {
  g_chunk_bytes = bytes;
}

uint64_t linear_cross_entropy_chunk_bytes() {
  return g_chunk_bytes ? g_chunk_bytes : default_chunk_bytes();
}

int64_t linear_cross_entropy_chunk_rows(int64_t rows, int64_t vocab) {
  VKF_REQUIRE(rows >= 0 && vocab >= 1, "linear_cross_entropy_chunk_rows: rows {} and vocab {}",
              rows, vocab);
  const int64_t row_bytes = vocab * 4;
  int64_t chunk = static_cast<int64_t>(linear_cross_entropy_chunk_bytes()) / row_bytes;
  chunk = std::min(chunk, int64_t{std::numeric_limits<int32_t>::max()} / vocab);
  if (chunk >= rows) return std::max<int64_t>(rows, 1);
  if (chunk >= 128) chunk = chunk / 128 * 128;
  return std::max<int64_t>(chunk, 1);
}

void set_linear_cross_entropy_group_chunks(int64_t chunks) {
  VKF_REQUIRE(chunks >= 0, "linear_cross_entropy group chunks must be >= 0, got {}", chunks);
  g_group_chunks = chunks;
}

int64_t linear_cross_entropy_group_chunks(int64_t rows, int64_t vocab, int64_t chunk_rows) {
  VKF_REQUIRE(rows >= 0 && vocab >= 1 && chunk_rows >= 1,
              "linear_cross_entropy_group_chunks: rows {}, vocab {}, chunk_rows {}", rows, vocab,
              chunk_rows);
  if (g_group_chunks > 0) return g_group_chunks;
  // Rows of the dW product. On the H200, 4096 against 2048: 1B f16 step 364.0 / 364.0 ms against
  // 370.5 / 371.1 (+0.5 GiB peak), 135M 108.2 / 108.3 against 109.1 / 109.1 (+0.24 GiB).
  constexpr int64_t kDepth = 4096;
  const int64_t chunks = std::max<int64_t>((rows + chunk_rows - 1) / chunk_rows, 1);
  const int64_t budget = 4 * static_cast<int64_t>(linear_cross_entropy_chunk_bytes());
  const int64_t fit = std::max<int64_t>(budget / (chunk_rows * vocab * 2), 1);
  return std::min({(kDepth + chunk_rows - 1) / chunk_rows, fit, chunks});
}

CrossEntropyParts linear_cross_entropy(const Tensor& hidden_in, const Tensor& weight_in,
                                       const Tensor& labels_in,
                                       const LinearCrossEntropyOptions& o) {
  check_inputs(hidden_in, weight_in, labels_in, o);
  const int64_t rows = hidden_in.dim(0), width = hidden_in.dim(1), vocab = weight_in.dim(0);
  const int64_t chunk_rows = o.chunk_rows > 0 ? std::min(o.chunk_rows, std::max<int64_t>(rows, 1))
                                              : linear_cross_entropy_chunk_rows(rows, vocab);
  checked_u32(chunk_rows * vocab, "linear_cross_entropy chunk element count (chunk_rows x V)");

  // What is recorded (the tape's inputs) and what the kernels read: the same storage, but the
  // kernels' views must not record slices of their own on the tape.
  const Tensor hidden = hidden_in.is_contiguous() ? hidden_in : hidden_in.contiguous();
  const Tensor labels = labels_in.is_contiguous() ? labels_in : labels_in.contiguous();
  const Tensor h = hidden.detach(), w = weight_in.detach();
  const bool recording = autograd::should_record({&hidden, &weight_in});
  const bool want_dh = recording && hidden.requires_grad();
  const bool want_dw = recording && weight_in.requires_grad();

  auto pending = std::make_shared<PendingGrads>();
  if (want_dh) pending->dh = Tensor::empty({rows, width});
  if (want_dw)
    pending->dw = rows > 0 ? Tensor::empty({vocab, width}) : Tensor::zeros({vocab, width});
  const detail::IdHalves ignore = detail::id_halves(o.ignore_index);
  const std::string variant = detail::id_variant(labels.dtype());
  // Row losses as hi/lo pairs over all rows (see ce_forward.comp / ce_reduce.comp).
  Tensor row_loss = Tensor::empty({2 * rows});
  if (rows > 0) {
    const Tensor chunk = Tensor::empty({chunk_rows, vocab});  // [chunk, V]: z, then dz
    // With f16 operand copies, each chunk's dz is written as f16 into a group of chunks, and the
    // gradient products run per group: dh for the group's rows, and dW over the group's rows in
    // one product (at 512-row chunks, a K = 512 product re-reading and re-writing all of dW each
    // time ran at half the speed of the others). The logits products of a group's chunks reuse
    // one f16 copy of W (F16OperandReuse), freed before the group's products so that it and
    // their own copy of W are not held at once. The same f16 operands as per-chunk products; dW
    // sums in another order.
    const bool grouped = (want_dh || want_dw) && detail::f16_operands_active();
    const int64_t group_chunks = !grouped ? 1
                                 : o.group_chunks > 0
                                     ? o.group_chunks
                                     : linear_cross_entropy_group_chunks(rows, vocab, chunk_rows);
    const Tensor dz16 =
        grouped ? Tensor::empty({std::min(group_chunks * chunk_rows, rows), vocab}, DType::F16)
                : Tensor();
    detail::F16OperandReuse head_weight;
    // On the fp32 tiled kernel, the logits products' B (W^T) in the kernel's fast layout, copied
    // once for every chunk (matmul_relayout.h; H200, 1B shape, 512-row chunks: 6.03 ms per
    // chunk's product against 6.80 read as W^T, for one 0.59 ms copy).
    const std::optional<detail::MatDesc> w_fast =
        grouped ? std::nullopt
                : detail::tiled_b_kept_relaid(detail::describe_rows(w).transposed(), rows);
    int64_t group_first = 0, group_rows = 0;
    const auto group_products = [&] {
      head_weight.clear();
      const detail::MatDesc dz = detail::describe_rows(dz16.slice(0, 0, group_rows));
      const int64_t end = group_first + group_rows;
      if (want_dh)  // dh = dz W
        detail::gemm(dz, detail::describe_rows(w),
                     detail::describe_rows(pending->dh.slice(0, group_first, end)), 1.0f, 0.0f);
      if (want_dw)  // dW (+)= dz^T h
        detail::gemm(dz.transposed(), detail::describe_rows(h.slice(0, group_first, end)),
                     detail::describe_rows(pending->dw), 1.0f, group_first == 0 ? 0.0f : 1.0f);
      group_first = end;
      group_rows = 0;
    };
    for (int64_t first = 0; first < rows; first += chunk_rows) {
      const int64_t n = std::min(chunk_rows, rows - first);
      const Tensor z = chunk.slice(0, 0, n);
      const Tensor h_chunk = h.slice(0, first, first + n);
      if (w_fast) {
        detail::gemm(detail::describe_rows(h_chunk), *w_fast, detail::describe_rows(z), 1.0f, 0.0f);
      } else {
        const detail::F16OperandReuse::Use reuse(head_weight);
        matmul_into(h_chunk, w, false, true, z);
      }
      // Grouped: the gradient goes straight into the group as f16.
      const Tensor dz16_chunk = grouped ? dz16.slice(0, group_rows, group_rows + n) : Tensor();
      struct {
        uint64_t logits, labels, row_loss, grad16;
        uint32_t rows, first_row, total_rows, vocab;
        int32_t ignore_lo, ignore_hi;
        float scale, cap;
        uint32_t write_grad;
      } push{z.address(),
             labels.address(),
             row_loss.address(),
             grouped ? dz16_chunk.address() : 0,
             static_cast<uint32_t>(n),
             static_cast<uint32_t>(first),
             static_cast<uint32_t>(rows),
             static_cast<uint32_t>(vocab),
             ignore.lo,
             ignore.hi,
             o.logit_scale,
             o.softcap,
             (want_dh || want_dw) ? 1u : 0u};
      const double elements = static_cast<double>(n * vocab);
      const Tensor& grad_out = grouped ? dz16_chunk : z;
      launch("linear_ce_rows_" + variant, push, grid_1d(n, 1), {&z, &labels},
             {&grad_out, &row_loss}, {}, {12.0 * elements, (grouped ? 14.0 : 16.0) * elements});
      if (grouped) {
        group_rows += n;
        const int64_t next = std::min(chunk_rows, rows - first - n);  // 0 after the last chunk
        if (next == 0 || group_rows + next > dz16.dim(0)) group_products();
        continue;
      }
      if (want_dh) matmul_into(z, w, false, false, pending->dh.slice(0, first, first + n));
      if (want_dw)
        matmul_into(z, h_chunk, true, false, pending->dw, 1.0f, first == 0 ? 0.0f : 1.0f);
    }
  }
  CrossEntropyParts out{Tensor::empty({}), Tensor::empty({})};
  struct {
    uint64_t row_loss, labels, loss_sum, count, mean;
    uint32_t rows;
    int32_t ignore_lo, ignore_hi;
  } reduce{row_loss.address(),
           labels.address(),
           out.loss_sum.address(),
           out.count.address(),
           0,
           static_cast<uint32_t>(rows),
           ignore.lo,
           ignore.hi};
  launch("ce_reduce_" + variant, reduce, Grid{1, 1, 1}, {&row_loss, &labels},
         {&out.loss_sum, &out.count});

  if (recording) {
    autograd::record_op("linear_cross_entropy", {hidden, weight_in}, {out.loss_sum},
                        [pending](autograd::GradContext& ctx) {
                          // The backward runs once: the gradients leave the op's keeping here.
                          PendingGrads g = std::move(*pending);
                          const Tensor& dloss = ctx.grad_output(0);
                          if (!dloss.defined()) return;
                          if (g.dh.defined() && ctx.needs_grad(0)) {
                            scale_by_device_scalar_(g.dh, dloss);
                            ctx.add_grad_owned(0, std::move(g.dh));
                          }
                          if (g.dw.defined() && ctx.needs_grad(1)) {
                            scale_by_device_scalar_(g.dw, dloss);
                            ctx.add_grad_owned(1, std::move(g.dw));
                          }
                        });
  }
  return out;
}

}  // namespace vkf::ops
