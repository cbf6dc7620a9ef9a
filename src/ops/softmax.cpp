// Softmax / log-softmax over rows (see softmax.h), kernel softmax.comp. Rows up to kShortRow
// elements share a workgroup (32 invocations each, at most 32 elements per invocation) so that
// many short rows, such as attention rows, do not leave most invocations idle; longer rows get a
// workgroup of 256 invocations each.
#include "ops/softmax.h"

#include <string>

#include "core/autograd.h"
#include "core/launch.h"
#include "ops/checks.h"
#include "vk/error.h"

namespace vkf::ops {
namespace {

using detail::check_f32;

constexpr int64_t kShortRow = 1024;
constexpr int64_t kShortRowsPerGroup = 256 / 32;

struct SoftmaxPush {
  uint64_t x, dy, out;
  uint32_t rows, len;
};

// Forward (dy undefined: out = softmax(x)) or backward (x = forward output y, out = dx).
void run(bool log, const Tensor& x, const Tensor& dy, const Tensor& out) {
  const int64_t len = x.dim(-1);
  const int64_t rows = x.numel() / len;
  const bool backward = dy.defined();
  const Tensor& d = backward ? dy : x;
  const SoftmaxPush push{x.address(), d.address(), out.address(), checked_u32(rows, "row count"),
                         checked_u32(len, "row length")};
  const bool short_rows = len <= kShortRow;
  const int64_t groups = short_rows ? (rows + kShortRowsPerGroup - 1) / kShortRowsPerGroup : rows;
  const std::string module = std::string("softmax_") + (backward ? "bwd" : "fwd") + (short_rows ? "_short" : "");
  const double n = static_cast<double>(x.numel());
  launch(module, push, grid_1d(groups, 1), {&x, &d}, {&out}, {log ? 1u : 0u},
         {n * 5.0, n * (backward ? 16.0 : 12.0)});
}

Tensor softmax_op(const Tensor& x, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  check_f32(x, name, "x");
  VKF_REQUIRE(x.rank() >= 1, "{}: x is a scalar (shape []); expected at least one dimension", name);
  const Tensor xc = x.is_contiguous() ? x : x.contiguous();
  Tensor y = Tensor::empty(x.shape(), DType::F32);
  run(log, xc, {}, y);
  // The backward needs only the output, which the node's outputs keep alive anyway.
  autograd::record_op(name, {xc}, {y}, [log, y](autograd::GradContext& ctx) {
    const Tensor& g = ctx.grad_output(0);
    if (!g.defined()) return;
    const Tensor gc = g.is_contiguous() ? g : g.contiguous();
    Tensor dx = Tensor::empty(y.shape(), DType::F32);
    run(log, y, gc, dx);
    ctx.add_grad(0, dx);
  });
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x) { return softmax_op(x, false); }
Tensor log_softmax(const Tensor& x) { return softmax_op(x, true); }

}  // namespace vkf::ops
