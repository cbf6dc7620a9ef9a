// Broadcasting elementwise arithmetic and its gradients (see elementwise.h). One kernel module,
// elementwise.comp: a flat variant when every operand walks memory contiguously after dimension
// merging (the common equal-shape case), a strided variant otherwise.
#include "ops/elementwise.h"

#include <cstring>

#include "core/autograd.h"
#include "core/launch.h"
#include "ops/checks.h"
#include "ops/reduce.h"
#include "ops/strided.h"
#include "vk/error.h"

namespace vkf::ops {
namespace {

using detail::check_f32;
using detail::kMaxKernelDims;

enum class Op : uint32_t { Add = 0, Sub = 1, Mul = 2, Copy = 3, Scale = 4 };

struct ElementwisePush {
  uint64_t a, b, out;
  uint32_t n, rank;
  float alpha;
  uint32_t shape[kMaxKernelDims];
  int32_t a_strides[kMaxKernelDims];
  int32_t b_strides[kMaxKernelDims];
};

int32_t kernel_stride(int64_t s) { return static_cast<int32_t>(checked_u32(s, "stride")); }

// out = op(a, b) with a and b broadcast to out's shape; out is contiguous and may be a itself.
// b is unused (may be undefined) for Copy and Scale.
void run(Op op, const Tensor& a, const Tensor& b, const Tensor& out, float alpha, const char* name) {
  const Shape& shape = out.shape();
  const Tensor& bb = b.defined() ? b : a;
  const detail::LoopNest nest =
      detail::merge(shape, {detail::broadcast_strides(a, shape), detail::broadcast_strides(bb, shape)});
  ElementwisePush push{};
  push.a = a.address();
  push.b = bb.address();
  push.out = out.address();
  push.n = checked_u32(out.numel(), "element count");
  push.alpha = alpha;
  const bool flat =
      nest.rank() == 0 || (nest.rank() == 1 && nest.strides[0][0] == 1 && nest.strides[1][0] == 1);
  if (!flat) {
    VKF_REQUIRE(nest.rank() <= kMaxKernelDims,
                "{}: operands {} and {} need {} dimensions after merging; at most {} are supported",
                name, shape_str(a.shape()), shape_str(bb.shape()), nest.rank(), kMaxKernelDims);
    push.rank = static_cast<uint32_t>(nest.rank());
    for (int d = 0; d < nest.rank(); ++d) {
      push.shape[d] = checked_u32(nest.shape[d], "dimension");
      push.a_strides[d] = kernel_stride(nest.strides[0][d]);
      push.b_strides[d] = kernel_stride(nest.strides[1][d]);
    }
  }
  const double n = static_cast<double>(out.numel());
  const bool flat4 = flat && out.numel() % 4 == 0 && a.address() % 16 == 0 &&
                     bb.address() % 16 == 0 && out.address() % 16 == 0;
  launch(flat4  ? "elementwise_flat4"
         : flat ? "elementwise_flat"
                : "elementwise_strided",
         push, grid_1d(flat4 ? out.numel() / 4 : out.numel(), 256), {&a, &bb}, {&out},
         {static_cast<uint32_t>(op)}, {n, n * 12.0});
}

Tensor run_new(Op op, const Tensor& a, const Tensor& b, const Shape& shape, float alpha,
               const char* name) {
  Tensor out = Tensor::empty(shape, DType::F32);
  run(op, a, b, out, alpha, name);
  return out;
}

// A differentiable binary op with broadcasting.
Tensor binary(Op op, const char* name, const Tensor& a, const Tensor& b) {
  check_f32(a, name, "a");
  check_f32(b, name, "b");
  const Shape shape = detail::broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = run_new(op, a, b, shape, 1.0f, name);
  // Only mul needs the operands themselves; add and sub need their shapes.
  const Tensor saved_a = op == Op::Mul ? a : Tensor();
  const Tensor saved_b = op == Op::Mul ? b : Tensor();
  autograd::record_op(name, {a, b}, {out},
                      [op, name, saved_a, saved_b, sa = a.shape(), sb = b.shape()](
                          autograd::GradContext& ctx) {
    const Tensor& g = ctx.grad_output(0);
    if (!g.defined()) return;
    if (ctx.needs_grad(0)) {
      Tensor ga = op == Op::Mul ? run_new(Op::Mul, g, saved_b, g.shape(), 1.0f, name) : g;
      ctx.add_grad(0, sum_to_shape(ga, sa));
    }
    if (ctx.needs_grad(1)) {
      Tensor gb = op == Op::Mul ? run_new(Op::Mul, g, saved_a, g.shape(), 1.0f, name) : g;
      gb = sum_to_shape(gb, sb);
      if (op == Op::Sub) gb = run_new(Op::Scale, gb, {}, gb.shape(), -1.0f, name);
      ctx.add_grad(1, gb);
    }
  });
  return out;
}

}  // namespace

Shape broadcast_shape(const Shape& a, const Shape& b, const char* op) {
  return detail::broadcast_shapes(a, b, op);
}

Tensor add(const Tensor& a, const Tensor& b) { return binary(Op::Add, "add", a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(Op::Sub, "sub", a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(Op::Mul, "mul", a, b); }

Tensor scale(const Tensor& x, float s) {
  check_f32(x, "scale", "x");
  Tensor out = run_new(Op::Scale, x, {}, x.shape(), s, "scale");
  autograd::record_op("scale", {x}, {out}, [s](autograd::GradContext& ctx) {
    const Tensor& g = ctx.grad_output(0);
    if (g.defined()) ctx.add_grad(0, run_new(Op::Scale, g, {}, g.shape(), s, "scale"));
  });
  return out;
}

Tensor bias_add(const Tensor& x, const Tensor& bias) {
  check_f32(x, "bias_add", "x");
  check_f32(bias, "bias_add", "bias");
  VKF_REQUIRE(x.rank() >= 1 && bias.rank() == 1 && bias.dim(0) == x.dim(-1),
              "bias_add: bias has shape {} for x of shape {}; expected a bias of shape [N] with N "
              "the last dimension of x",
              shape_str(bias.shape()), shape_str(x.shape()));
  return binary(Op::Add, "bias_add", x, bias);
}

Tensor residual_add(const Tensor& x, const Tensor& y) {
  check_f32(x, "residual_add", "x");
  check_f32(y, "residual_add", "y");
  VKF_REQUIRE(x.shape() == y.shape(),
              "residual_add: x has shape {} and y has shape {}; the residual stream needs equal shapes",
              shape_str(x.shape()), shape_str(y.shape()));
  return binary(Op::Add, "residual_add", x, y);
}

Tensor expand(const Tensor& x, const Shape& shape) {
  check_f32(x, "expand", "x");
  VKF_REQUIRE(shape.size() >= x.shape().size() &&
                  detail::broadcast_shapes(x.shape(), shape, "expand") == shape,
              "expand: x of shape {} cannot be broadcast to {}", shape_str(x.shape()),
              shape_str(shape));
  VKF_REQUIRE(shape_numel(shape) > 0, "expand: target shape {} has no elements", shape_str(shape));
  Tensor out = run_new(Op::Copy, x, {}, shape, 1.0f, "expand");
  autograd::record_op("expand", {x}, {out}, [sx = x.shape()](autograd::GradContext& ctx) {
    const Tensor& g = ctx.grad_output(0);
    if (g.defined()) ctx.add_grad(0, sum_to_shape(g, sx));
  });
  return out;
}

void add_(const Tensor& dst, const Tensor& src) {
  check_f32(dst, "add_", "dst");
  check_f32(src, "add_", "src");
  VKF_REQUIRE(dst.is_contiguous(), "add_: dst of shape {} must be contiguous",
              shape_str(dst.shape()));
  VKF_REQUIRE(src.shape().size() <= dst.shape().size() &&
                  detail::broadcast_shapes(dst.shape(), src.shape(), "add_") == dst.shape(),
              "add_: src of shape {} does not broadcast to dst of shape {}", shape_str(src.shape()),
              shape_str(dst.shape()));
  // Elements are updated independently, so src may be dst itself but not another view of it.
  const bool same_view = src.same_storage(dst) && src.offset() == dst.offset() &&
                         src.shape() == dst.shape() && src.strides() == dst.strides();
  autograd::NoGradScope no_grad;
  const Tensor s = src.same_storage(dst) && !same_view ? src.contiguous() : src;
  run(Op::Add, dst, s, dst, 1.0f, "add_");
}

}  // namespace vkf::ops
