// RMSNorm and LayerNorm: validation, dispatch and backward (see norm.h; kernels norm_*.comp).
//
// Forward saves per-row mean/rstd only when a tape records the op. Backward: dx by one row kernel;
// the weight/bias gradients, sums over every row, by column sums over blocks of rows into a
// [blocks, H] scratch, then an in-order sum over blocks (no atomics, order fixed by the sizes).
#include "ops/norm.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "core/autograd.h"
#include "core/launch.h"
#include "vk/error.h"

namespace vkf::ops {
namespace {

constexpr uint32_t kLocal = 256;

// Flags shared with norm_fwd.comp / norm_bwd.comp / norm_param_grad.comp.
constexpr uint32_t kFwdHasWeight = 1, kFwdOnePlus = 2, kFwdHasBias = 4, kFwdSaveStats = 8;
constexpr uint32_t kBwdHasWeight = 1, kBwdOnePlus = 2, kBwdAccumulate = 4;
constexpr uint32_t kParamWantW = 1, kParamWantB = 2, kParamAccumulate = 4;

struct NormSpec {
  const char* op;  // "rms_norm" or "layer_norm", for messages
  bool layer;
  bool one_plus;
};

// Enough workgroups for `rows` rows at 256 >> tpr_log2 rows per group (folded past 65535).
Grid row_grid(int64_t rows, uint32_t tpr_log2) {
  const int64_t rows_per_group = kLocal >> tpr_log2;
  const int64_t groups = (rows + rows_per_group - 1) / rows_per_group;
  return grid_1d(groups * kLocal, kLocal);
}

const char* variant(const NormSpec& s) {
  return s.layer ? "layer" : "rms";
}

void check_param(const NormSpec& s, const Tensor& p, const char* what, const Tensor& x) {
  if (!p.defined()) return;
  VKF_REQUIRE(p.dtype() == DType::F32, "{}: {} must be f32, got {}", s.op, what,
              dtype_name(p.dtype()));
  VKF_REQUIRE(p.rank() == 1 && p.dim(0) == x.dim(-1),
              "{}: {} must have shape [{}] (the last dimension of x {}), got {}", s.op, what,
              x.dim(-1), shape_str(x.shape()), shape_str(p.shape()));
}

Tensor contiguous_f32(const Tensor& t) {
  return t.is_contiguous() ? t : t.contiguous();
}

// dw and/or db (each undefined when not wanted) for rows of xc/dy, from the saved statistics.
void param_grads(const NormSpec& s, const Tensor& xc, const Tensor& dy, const Tensor& mean,
                 const Tensor& rstd, autograd::GradTarget* dw, autograd::GradTarget* db,
                 int64_t rows, int64_t h) {
  // At most 512 blocks of at least 32 rows: enough workgroups to fill a GPU, a small scratch.
  const int64_t rows_per_block = std::max<int64_t>(32, (rows + 511) / 512);
  const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  const uint32_t tw_log2 = std::min<uint32_t>(
      8, static_cast<uint32_t>(std::countr_zero(std::bit_ceil(static_cast<uint64_t>(h)))));
  const bool direct = blocks == 1;
  Tensor dw_part, db_part;
  if (dw) dw_part = direct ? dw->tensor : Tensor::empty({blocks, h});
  if (db) db_part = direct ? db->tensor : Tensor::empty({blocks, h});
  struct {
    uint64_t x, dy, mean, rstd, dw, db;
    uint32_t rows, h, rows_per_block, tw_log2, flags;
  } push{};
  push.x = xc.address();
  push.dy = dy.address();
  push.mean = mean.defined() ? mean.address() : 0;
  push.rstd = rstd.address();
  push.dw = dw_part.defined() ? dw_part.address() : 0;
  push.db = db_part.defined() ? db_part.address() : 0;
  push.rows = checked_u32(rows, "rows");
  push.h = checked_u32(h, "row length");
  push.rows_per_block = static_cast<uint32_t>(rows_per_block);
  push.tw_log2 = tw_log2;
  const bool accumulate_direct = direct && ((dw && dw->accumulate) || (db && db->accumulate));
  // With one block and targets that differ in accumulate mode, run the w and b halves apart.
  auto run = [&](uint32_t want, bool accumulate) {
    push.flags = want | (accumulate ? kParamAccumulate : 0);
    const Grid grid{div_up(h, int64_t{1} << tw_log2), static_cast<uint32_t>(blocks), 1};
    launch(std::string("norm_param_grad_") + variant(s), push, grid, {&xc, &dy, &mean, &rstd},
           {&dw_part, &db_part}, {},
           {4.0 * static_cast<double>(rows * h), 8.0 * static_cast<double>(rows * h)});
  };
  if (direct && dw && db && dw->accumulate != db->accumulate) {
    run(kParamWantW, dw->accumulate);
    run(kParamWantB, db->accumulate);
  } else {
    run((dw ? kParamWantW : 0) | (db ? kParamWantB : 0), accumulate_direct);
  }
  if (direct) return;
  auto reduce = [&](const Tensor& part, const autograd::GradTarget& target) {
    struct {
      uint64_t part, out;
      uint32_t blocks, h, accumulate;
    } rp{part.address(), target.tensor.address(), static_cast<uint32_t>(blocks),
         static_cast<uint32_t>(h), target.accumulate ? 1u : 0u};
    launch("norm_column_sum", rp, grid_1d(h, kLocal), {&part}, {&target.tensor});
  };
  if (dw) reduce(dw_part, *dw);
  if (db) reduce(db_part, *db);
}

Tensor norm_forward(const NormSpec& s, const Tensor& x, const Tensor& weight, const Tensor& bias,
                    float eps) {
  VKF_REQUIRE(x.defined(), "{}: x is undefined", s.op);
  VKF_REQUIRE(x.dtype() == DType::F32, "{}: x must be f32, got {}", s.op, dtype_name(x.dtype()));
  VKF_REQUIRE(x.rank() >= 1 && x.numel() > 0,
              "{}: x must be a non-empty tensor [..., H], got shape {}", s.op,
              shape_str(x.shape()));
  check_param(s, weight, "weight", x);
  check_param(s, bias, "bias", x);
  VKF_REQUIRE(std::isfinite(eps) && eps >= 0.0f, "{}: eps must be finite and >= 0, got {}", s.op,
              eps);

  const Tensor xc = contiguous_f32(x);
  const Tensor w = weight.defined() ? contiguous_f32(weight) : Tensor();
  const Tensor b = bias.defined() ? contiguous_f32(bias) : Tensor();
  const int64_t h = x.dim(-1);
  const int64_t rows = x.numel() / h;
  checked_u32(x.numel(), "x element count");
  // The weight-gradient kernel tiles columns by up to 256 over at most 65535 workgroups.
  VKF_REQUIRE(h <= int64_t{65535} * kLocal,
              "{}: rows of {} elements are not supported (at most {})", s.op, h,
              int64_t{65535} * kLocal);
  const uint32_t tpr_log2 = detail::norm_threads_per_row_log2(h);
  const bool save = autograd::should_record({&xc, &w, &b});

  Tensor y = Tensor::empty(x.shape(), DType::F32);
  Tensor mean = save && s.layer ? Tensor::empty({rows}) : Tensor();
  Tensor rstd = save ? Tensor::empty({rows}) : Tensor();
  struct {
    uint64_t x, w, b, y, mean, rstd;
    uint32_t rows, h, tpr_log2;
    float eps;
    uint32_t flags;
  } push{};
  push.x = xc.address();
  push.w = w.defined() ? w.address() : 0;
  push.b = b.defined() ? b.address() : 0;
  push.y = y.address();
  push.mean = mean.defined() ? mean.address() : 0;
  push.rstd = rstd.defined() ? rstd.address() : 0;
  push.rows = static_cast<uint32_t>(rows);
  push.h = static_cast<uint32_t>(h);
  push.tpr_log2 = tpr_log2;
  push.eps = eps;
  push.flags = (w.defined() ? kFwdHasWeight : 0) | (s.one_plus ? kFwdOnePlus : 0) |
               (b.defined() ? kFwdHasBias : 0) | (save ? kFwdSaveStats : 0);
  const double n = static_cast<double>(x.numel());
  launch(std::string("norm_fwd_") + variant(s), push, row_grid(rows, tpr_log2), {&xc, &w, &b},
         {&y, &mean, &rstd}, {}, {(s.layer ? 7.0 : 4.0) * n, (s.layer ? 12.0 : 8.0) * n});
  if (!save) return y;

  autograd::record_op(
      s.op, {xc, w, b}, {y}, [s, xc, w, mean, rstd, rows, h, tpr_log2](autograd::GradContext& ctx) {
        const Tensor& g = ctx.grad_output(0);
        if (!g.defined()) return;
        const Tensor dy = contiguous_f32(g);
        if (ctx.needs_grad(0)) {
          autograd::GradTarget dx = ctx.grad_target(0);
          struct {
            uint64_t x, w, dy, mean, rstd, dx;
            uint32_t rows, h, tpr_log2, flags;
          } bp{};
          bp.x = xc.address();
          bp.w = w.defined() ? w.address() : 0;
          bp.dy = dy.address();
          bp.mean = mean.defined() ? mean.address() : 0;
          bp.rstd = rstd.address();
          bp.dx = dx.tensor.address();
          bp.rows = static_cast<uint32_t>(rows);
          bp.h = static_cast<uint32_t>(h);
          bp.tpr_log2 = tpr_log2;
          bp.flags = (w.defined() ? kBwdHasWeight : 0) | (s.one_plus ? kBwdOnePlus : 0) |
                     (dx.accumulate ? kBwdAccumulate : 0);
          const double elems = static_cast<double>(rows * h);
          launch(std::string("norm_bwd_") + variant(s), bp, row_grid(rows, tpr_log2),
                 {&xc, &w, &dy, &mean, &rstd}, {&dx.tensor}, {}, {10.0 * elems, 16.0 * elems});
        }
        const bool want_w = ctx.needs_grad(1), want_b = ctx.needs_grad(2);
        if (!want_w && !want_b) return;
        autograd::GradTarget dw{}, db{};
        if (want_w) dw = ctx.grad_target(1);
        if (want_b) db = ctx.grad_target(2);
        param_grads(s, xc, dy, mean, rstd, want_w ? &dw : nullptr, want_b ? &db : nullptr, rows, h);
      });
  return y;
}

}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps, bool one_plus_weight) {
  return norm_forward({"rms_norm", false, one_plus_weight}, x, weight, Tensor(), eps);
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) {
  return norm_forward({"layer_norm", true, false}, x, weight, bias, eps);
}

namespace detail {
uint32_t norm_threads_per_row_log2(int64_t h) {
  const uint64_t want = std::bit_ceil(static_cast<uint64_t>((h + 7) / 8));
  return static_cast<uint32_t>(std::min<int>(std::countr_zero(want), 8));
}
}  // namespace detail

}  // namespace vkf::ops
