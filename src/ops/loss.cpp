// Cross-entropy forward and backward (see loss.h; kernels ce_forward.comp, ce_reduce.comp and
// ce_backward.comp). The forward runs one workgroup per row (ce_forward) then one workgroup over
// the rows (ce_reduce); the backward is one flat elementwise pass over [N, V] that reads the
// incoming gradient and the count from GPU memory.
#include "ops/loss.h"

#include <string>

#include "core/autograd.h"
#include "core/launch.h"
#include "ops/token_ids.h"
#include "vk/error.h"

namespace vkf::ops {
namespace {

constexpr uint32_t kLocal = 256;


struct Forward {
  Tensor logits;  // contiguous [N, V]
  Tensor labels;  // contiguous [N]
  Tensor lse;     // [N]
  Tensor loss_sum, count, mean;  // [] each; mean undefined unless asked for
};

Forward forward(const char* op, const Tensor& logits, const Tensor& labels, int64_t ignore_index,
                bool want_mean) {
  VKF_REQUIRE(logits.defined(), "{}: logits tensor is undefined", op);
  VKF_REQUIRE(logits.dtype() == DType::F32, "{}: logits must be f32, got {}", op,
              dtype_name(logits.dtype()));
  VKF_REQUIRE(logits.rank() == 2 && logits.dim(1) >= 1,
              "{}: logits must be [N, V] with V >= 1, got shape {}", op,
              shape_str(logits.shape()));
  VKF_REQUIRE(labels.defined(), "{}: labels tensor is undefined", op);
  VKF_REQUIRE(labels.dtype() == DType::I32 || labels.dtype() == DType::I64,
              "{}: labels must be i32 or i64, got {}", op, dtype_name(labels.dtype()));
  VKF_REQUIRE(labels.rank() == 1 && labels.dim(0) == logits.dim(0),
              "{}: labels must be [N] = [{}] to match logits {}, got shape {}", op, logits.dim(0),
              shape_str(logits.shape()), shape_str(labels.shape()));
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  checked_u32(logits.numel(), "logits element count");

  Forward f;
  f.logits = logits.is_contiguous() ? logits : logits.contiguous();
  f.labels = labels.is_contiguous() ? labels : labels.contiguous();
  f.lse = Tensor::empty({rows});
  f.loss_sum = Tensor::empty({});
  f.count = Tensor::empty({});
  if (want_mean) f.mean = Tensor::empty({});
  const detail::IdHalves ignore = detail::id_halves(ignore_index);
  const std::string variant = detail::id_variant(f.labels.dtype());

  // Row losses as hi/lo pairs: [0, rows) the f32 value, [rows, 2 rows) what rounding it dropped
  // (written by precise kernels, 0 otherwise), so the mean can be formed before rounding.
  Tensor row_loss = Tensor::empty({2 * rows});
  if (rows > 0) {
    struct {
      uint64_t logits, labels, lse, row_loss;
      uint32_t rows, vocab;
      int32_t ignore_lo, ignore_hi;
    } push{f.logits.address(), f.labels.address(),      f.lse.address(),
           row_loss.address(), static_cast<uint32_t>(rows), static_cast<uint32_t>(vocab),
           ignore.lo,          ignore.hi};
    const double n = static_cast<double>(logits.numel());
    launch("ce_forward_" + variant, push, grid_1d(rows, 1), {&f.logits, &f.labels},
           {&f.lse, &row_loss}, {}, {4.0 * n, 8.0 * n});
  }
  struct {
    uint64_t row_loss, labels, loss_sum, count, mean;
    uint32_t rows;
    int32_t ignore_lo, ignore_hi;
  } reduce{row_loss.address(),   f.labels.address(),
           f.loss_sum.address(), f.count.address(),
           want_mean ? f.mean.address() : 0, static_cast<uint32_t>(rows),
           ignore.lo,            ignore.hi};
  launch("ce_reduce_" + variant, reduce, Grid{1, 1, 1}, {&row_loss, &f.labels},
         {&f.loss_sum, &f.count, &f.mean});
  return f;
}

// dlogits (+)= (softmax - onehot) * dloss [/ count] into the gradient target of the logits.
void backward(const Forward& f, int64_t ignore_index, bool divide, autograd::GradContext& ctx) {
  const Tensor& dloss = ctx.grad_output(0);
  if (!dloss.defined() || !ctx.needs_grad(0)) return;
  autograd::GradTarget target = ctx.grad_target(0);
  VKF_REQUIRE(target.tensor.is_contiguous(), "cross_entropy backward: gradient target of shape {} "
              "is not contiguous", shape_str(target.tensor.shape()));
  const int64_t total = f.logits.numel();
  if (total == 0) return;
  const detail::IdHalves ignore = detail::id_halves(ignore_index);
  struct {
    uint64_t logits, labels, lse, dloss, count, dlogits;
    uint32_t total, vocab;
    int32_t ignore_lo, ignore_hi;
    uint32_t divide, accumulate;
  } push{f.logits.address(),
         f.labels.address(),
         f.lse.address(),
         dloss.address(),
         f.count.address(),
         target.tensor.address(),
         static_cast<uint32_t>(total),
         static_cast<uint32_t>(f.logits.dim(1)),
         ignore.lo,
         ignore.hi,
         divide ? 1u : 0u,
         target.accumulate ? 1u : 0u};
  const double n = static_cast<double>(total);
  launch(std::string("ce_backward_") + detail::id_variant(f.labels.dtype()), push,
         grid_1d(total, kLocal), {&f.logits, &f.labels, &f.lse, &dloss, &f.count, &target.tensor},
         {&target.tensor}, {}, {4.0 * n, (target.accumulate ? 12.0 : 8.0) * n});
}

// What the backward keeps: the inputs, lse and count, not the outputs.
Forward saved_for_backward(const Forward& f) {
  Forward s = f;
  s.loss_sum = Tensor();
  s.mean = Tensor();
  return s;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, int64_t ignore_index) {
  const Forward f = forward("cross_entropy", logits, labels, ignore_index, true);
  autograd::record_op("cross_entropy", {f.logits}, {f.mean},
                      [s = saved_for_backward(f), ignore_index](autograd::GradContext& ctx) {
                        backward(s, ignore_index, true, ctx);
                      });
  return f.mean;
}

CrossEntropyParts cross_entropy_parts(const Tensor& logits, const Tensor& labels,
                                      int64_t ignore_index) {
  const Forward f = forward("cross_entropy_parts", logits, labels, ignore_index, false);
  autograd::record_op("cross_entropy_parts", {f.logits}, {f.loss_sum},
                      [s = saved_for_backward(f), ignore_index](autograd::GradContext& ctx) {
                        backward(s, ignore_index, false, ctx);
                      });
  return {f.loss_sum, f.count};
}

void check_labels(const std::vector<int64_t>& labels, int64_t vocab, int64_t ignore_index,
                  const char* where) {
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] == ignore_index) continue;
    VKF_REQUIRE(labels[i] >= 0 && labels[i] < vocab,
                "{}: label {} at position {} is outside the vocabulary [0, {}) and is not "
                "ignore_index ({})",
                where, labels[i], i, vocab, ignore_index);
  }
}

}  // namespace vkf::ops
