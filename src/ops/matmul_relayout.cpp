// Operand relayout for the fp32 tiled GEMM (see matmul_relayout.h).
#include "ops/matmul_relayout.h"

#include <cstdlib>
#include <optional>
#include <string>

#include "core/autograd.h"
#include "core/launch.h"
#include "ops/matmul_coopmat.h"
#include "vk/context.h"
#include "vk/error.h"

namespace vkf::ops::detail {
namespace {

std::optional<RelayoutChoice> g_choice;  // unset: VKF_GEMM_RELAYOUT, else Auto

RelayoutChoice relayout_choice() {
  if (!g_choice) {
    const char* env = std::getenv("VKF_GEMM_RELAYOUT");
    const std::string v = env ? env : "auto";
    VKF_REQUIRE(v == "auto" || v == "always" || v == "off",
                "VKF_GEMM_RELAYOUT='{}': use auto (NVIDIA devices, large products), always or off",
                v);
    g_choice = v == "always" ? RelayoutChoice::Always
               : v == "off"  ? RelayoutChoice::Off
                             : RelayoutChoice::Auto;
  }
  return *g_choice;
}

constexpr int64_t kTransposeTile = 32;  // matmul_transpose.comp's tile edge

// The rule, from the H200's measurements of the large tile (matmul_bench, every layout of the
// training shapes of the 135M and 1B models): "tn" is about 10% faster than "nt" and 7% faster
// than "nn" or "tt". A transposition moves 8 bytes per element (read and write); the device
// does about 14 fp32 FLOPs in the time of a byte of copy (42 TFLOP/s, 2.9 TB/s). A relayout is
// made where the FLOPs it saves are at least 1.5 times those its copies cost. One operand is
// relaid up to K = 8192: "nn" 8192 x 2048 x 8192 (the MLP's input gradients at 1B) ran at 41.4
// TFLOP/s against 46.0 "tn" (eighteenth session; in the eighth, before the pipelined kernel's
// later changes, the two were as fast); at K = 128256 (the LM head's dh per loss chunk, 512 x
// 2048 x 128256, stream-K) "tn" gains only 2%, less than the copy costs.
constexpr double kGainNt = 0.10, kGainOne = 0.07;
constexpr double kFlopsPerByte = 14.0, kMargin = 1.5;
constexpr int64_t kMaxKForOne = 8192;

// Whether a copy of d's transpose fits the transpose kernel's grid and 32-bit indices.
bool copy_fits(const MatDesc& d) {
  const int64_t limit = 65535 * kTransposeTile;
  return d.rows <= limit && d.cols <= limit && d.batch <= 65535 &&
         d.batch * d.rows * d.cols <= int64_t{0xffffffff};
}

// Whether operand d (A when is_a, else B) is in its slow layout as kernel_layout() reads it: A
// row-major (rows contiguous, more than one column), B column-major.
bool in_slow_layout(const MatDesc& d, bool is_a) {
  const bool rows_contiguous = d.cs == 1 || d.cols == 1;
  return is_a ? rows_contiguous && d.cols > 1 : !rows_contiguous;
}

bool relayout_allowed() {
  const RelayoutChoice choice = relayout_choice();
  if (choice == RelayoutChoice::Off) return false;
  return choice == RelayoutChoice::Always ||
         vk::Context::get().info().vendor_id == vk::kNvidiaVendorId;
}

// Operand d in the kernel's fast layout: the A operand (row-major now) made column-major, or the
// B operand (column-major now) made row-major, as a copy (f32, or f16 with to_f16).
MatDesc relaid(const MatDesc& d, bool is_a, bool to_f16) {
  const Tensor t = transposed_copy(d, !is_a, to_f16);  // [batch, K, M] for A, [batch, K, N] for B
  const int64_t bs = d.batch == 1 ? 0 : d.rows * d.cols;
  return is_a ? MatDesc{t, d.batch, d.rows, d.cols, bs, 1, d.rows}
              : MatDesc{t, d.batch, d.rows, d.cols, bs, d.cols, 1};
}

}  // namespace

Tensor transposed_copy(const MatDesc& d, bool column_major, bool to_f16) {
  // Source rows R of C contiguous elements at stride ld.
  const int64_t R = column_major ? d.cols : d.rows, C = column_major ? d.rows : d.cols;
  const int64_t ld = column_major ? d.cs : d.rs;
  autograd::NoGradScope no_grad;
  Tensor out = Tensor::empty({d.batch, C, R}, to_f16 ? DType::F16 : DType::F32);
  struct {
    uint64_t src, dst;
    uint32_t rows, cols, ld, bs;
  } push{d.t.address(),
         out.address(),
         static_cast<uint32_t>(R),
         static_cast<uint32_t>(C),
         static_cast<uint32_t>(R == 1 ? 0 : ld),
         static_cast<uint32_t>(d.batch == 1 ? 0 : d.bs)};
  const double elems = static_cast<double>(d.batch) * static_cast<double>(R * C);
  vk::DispatchCost cost{0.0, (to_f16 ? 6.0 : 8.0) * elems};
  if (vk::Context::get().stream().profiling_detail())
    cost.detail = fmt::format("{}{}x{}", d.batch > 1 ? fmt::format("{}*", d.batch) : "", R, C);
  launch(to_f16 ? "matmul_transpose_f16" : "matmul_transpose", push,
         Grid{div_up(C, kTransposeTile), div_up(R, kTransposeTile), static_cast<uint32_t>(d.batch)},
         {&d.t}, {&out}, {}, cost);
  return out;
}

void set_tiled_relayout(RelayoutChoice choice) {
  g_choice = choice;
}

std::optional<MatDesc> f16_operand_relaid(const MatDesc& d, bool is_a) {
  if (d.t.dtype() != DType::F32 || !relayout_allowed() || !in_slow_layout(d, is_a) || !copy_fits(d))
    return std::nullopt;
  return relaid(d, is_a, true);
}

bool relayout_pays(int64_t batch, int64_t m, int64_t n, int64_t k, int64_t a_batch, int64_t b_batch,
                   bool a_rows, bool b_cols) {
  if (!a_rows && !b_cols) return false;
  const double flops = 2.0 * static_cast<double>(batch) * static_cast<double>(m) *
                       static_cast<double>(n) * static_cast<double>(k);
  const double a_bytes = 8.0 * static_cast<double>(a_batch) * static_cast<double>(m * k);
  const double b_bytes = 8.0 * static_cast<double>(b_batch) * static_cast<double>(k * n);
  if (a_rows && b_cols) return kGainNt * flops >= kMargin * kFlopsPerByte * (a_bytes + b_bytes);
  if (k > kMaxKForOne) return false;
  return kGainOne * flops >= kMargin * kFlopsPerByte * (a_rows ? a_bytes : b_bytes);
}

std::optional<MatDesc> tiled_b_kept_relaid(const MatDesc& b, int64_t total_m) {
  if (coopmat_plan(b.batch, total_m, b.cols) || !relayout_allowed() || b.t.dtype() != DType::F32 ||
      !in_slow_layout(b, false) || !copy_fits(b))
    return std::nullopt;
  if (relayout_choice() == RelayoutChoice::Auto &&
      !kept_b_relayout_pays(b.batch, total_m, b.rows, b.cols))
    return std::nullopt;
  return relaid(b, false, false);
}

bool kept_b_relayout_pays(int64_t batch, int64_t total_m, int64_t k, int64_t n) {
  // Every product would otherwise run "nt" (its A relaid where that pays): the nt -> tn gain over
  // all of them against one copy of B.
  const double flops = 2.0 * static_cast<double>(batch) * static_cast<double>(total_m) *
                       static_cast<double>(k) * static_cast<double>(n);
  const double bytes = 8.0 * static_cast<double>(batch) * static_cast<double>(k * n);
  return kGainNt * flops >= kMargin * kFlopsPerByte * bytes;
}

bool relayout_copies(int64_t batch, int64_t m, int64_t n, int64_t k, bool a_rows, bool b_cols) {
  if (!relayout_allowed() || (!a_rows && !b_cols)) return false;
  return relayout_choice() != RelayoutChoice::Auto ||
         relayout_pays(batch, m, n, k, batch, batch, a_rows, b_cols);
}

void relayout_for_tiled(MatDesc& a, MatDesc& b, const MatDesc& c) {
  if (!relayout_allowed() || a.t.dtype() != DType::F32 || b.t.dtype() != DType::F32) return;
  const bool a_rows = in_slow_layout(a, true), b_cols = in_slow_layout(b, false);
  if (!a_rows && !b_cols) return;  // "tn" already
  if (relayout_choice() == RelayoutChoice::Auto &&
      !relayout_pays(c.batch, c.rows, c.cols, a.cols, a.batch, b.batch, a_rows, b_cols))
    return;
  if ((a_rows && !copy_fits(a)) || (b_cols && !copy_fits(b))) return;
  if (a_rows) a = relaid(a, true, false);
  if (b_cols) b = relaid(b, false, false);
}

}  // namespace vkf::ops::detail
