// ops::gated_projection and ops::gated_mlp (see gated_projection.h): the gated activation (and in
// gated_mlp its gradient) stored in f16, and the products on tensor cores reading them as their
// f16 operands.
#include "ops/gated_projection.h"

#include <cstdlib>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/autograd.h"
#include "ops/linear_group.h"
#include "ops/matmul.h"
#include "ops/matmul_kernels.h"
#include "vk/error.h"

namespace vkf::ops {
namespace {
// On unless VKF_F16_ACTIVATIONS=0 (for A/B timing against the composed ops, which give the same
// bits): the 1B f16 step measured 331.2 -> 322.7 ms and 43.56 -> 41.06 GiB peak on an H100
// (bench/RESULTS.md, thirty-third session).
bool f16_activations_default() {
  const char* env = std::getenv("VKF_F16_ACTIVATIONS");
  return env == nullptr || std::string(env) != "0";
}
bool g_enabled = f16_activations_default(), g_mlp_enabled = g_enabled;
}  // namespace

void set_gated_mlp(bool on) {
  g_mlp_enabled = on;
}

bool gated_mlp_enabled() {
  return g_mlp_enabled;
}

void set_gated_projection(bool on) {
  g_enabled = on;
}

bool gated_projection_enabled() {
  return g_enabled;
}

namespace {

// The down projection's backward for y's gradient dy, as linear's backward computes it for an f32
// h (h16 is what its products would have converted h to): dW into input `down_input` of ctx,
// and dh = dy W returned in f32 when `want_dh` (undefined otherwise).
Tensor down_backward(autograd::GradContext& ctx, const Tensor& dy, const Tensor& h16,
                     const Tensor& down, size_t down_input, bool want_dh) {
  std::optional<autograd::GradTarget> dw;
  if (ctx.needs_grad(down_input)) dw = ctx.grad_target(down_input);
  Tensor dh;
  if (want_dh) dh = Tensor::empty(h16.shape(), DType::F32);
  detail::linear_grads(detail::describe_rows(dy), h16, down, dh, 0.0f, dw ? dw->tensor : Tensor(),
                       dw ? dw->beta() : 0.0f);
  return dh;
}

}  // namespace

bool gated_projection_applies_to(int64_t rows, int64_t inner, int64_t out, bool bias) {
  // y = h W^T is rows x out and dW = G^T h out x inner: both read h16 (dh = G W takes gemm()'s
  // usual f32 route).
  return g_enabled && !bias && inner > 0 && detail::tensor_core_product(1, rows, out) &&
         detail::tensor_core_product(1, out, inner);
}

bool gated_projection_applies(const Tensor& gate_up, const Tensor& weight, const Tensor& bias) {
  if (!gate_up.defined() || !weight.defined()) return false;
  if (gate_up.dtype() != DType::F32 || weight.dtype() != DType::F32) return false;
  if (gate_up.rank() < 1 || weight.rank() != 2 || gate_up.dim(-1) % 2 != 0) return false;
  const int64_t inner = gate_up.dim(-1) / 2;
  if (weight.dim(1) != inner || gate_up.numel() == 0) return false;
  return gated_projection_applies_to(gate_up.numel() / gate_up.dim(-1), inner, weight.dim(0),
                                     bias.defined());
}

Tensor gated_projection(const Tensor& gate_up, Activation kind, bool gate_first,
                        const Tensor& weight) {
  VKF_REQUIRE(gated_projection_applies(gate_up, weight, Tensor()),
              "gated_projection: internal: called where gated_projection_applies() is false "
              "(gate_up {}, weight {})",
              shape_str(gate_up.shape()), shape_str(weight.shape()));
  const Tensor gu = gate_up.is_contiguous() ? gate_up : gate_up.contiguous();
  Shape y_shape = gu.shape();
  y_shape.back() = weight.dim(0);
  Tensor y = Tensor::empty(y_shape);
  Tensor h16;
  {
    autograd::NoGradScope no_grad;
    h16 = detail::gated_act_fused_value(gu, kind, gate_first, DType::F16);
    detail::gemm(detail::describe_rows(h16), detail::describe_readable(weight).transposed(),
                 detail::describe_rows(y), 1.0f, 0.0f);
  }
  autograd::record_op("gated_projection", {gu, weight}, {y},
                      [gu, h16, weight, kind, gate_first](autograd::GradContext& ctx) {
                        const Tensor& g = ctx.grad_output(0);
                        if (!g.defined()) return;
                        const bool want_dgu = ctx.needs_grad(0);
                        const Tensor dh = down_backward(ctx, g, h16, weight, 1, want_dgu);
                        if (!want_dgu) return;
                        autograd::NoGradScope no_grad;
                        ctx.add_grad(0, detail::gated_act_fused_grad(gu, kind, gate_first, dh));
                      });
  return y;
}

bool gated_mlp_applies_to(int64_t rows, int64_t in, int64_t inner, int64_t out, bool grouped) {
  // dx = G W_gate (+ G W_up, or G [Wg; Wu]) is rows x in; dW = G^T x inner (2 inner) x in: both
  // read the f16 gate/up gradient.
  return g_mlp_enabled && gated_projection_applies_to(rows, inner, out, false) &&
         detail::tensor_core_product(1, rows, in) &&
         detail::tensor_core_product(1, (grouped ? 2 : 1) * inner, in) &&
         (grouped || detail::tensor_core_product(1, rows, inner));
}

bool gated_mlp_applies(const Tensor& x, const Tensor& gate, const Tensor& up, const Tensor& down,
                       bool grouped) {
  for (const Tensor* t : {&x, &gate, &up, &down})
    if (!t->defined() || t->dtype() != DType::F32) return false;
  if (x.rank() < 1 || x.numel() == 0 || gate.rank() != 2 || up.shape() != gate.shape() ||
      down.rank() != 2)
    return false;
  const int64_t in = x.dim(-1), inner = gate.dim(0);
  if (gate.dim(1) != in || down.dim(1) != inner) return false;
  return gated_mlp_applies_to(x.numel() / in, in, inner, down.dim(0), grouped);
}

namespace {

// The separate form's backward from the f16 gradients of gate and up: the input and weight
// gradients as two linear layers' backward give them, up's first (its layer ran last, so the
// tape ran its backward first) and gate's added into the same dx. Both weight gradients read x's
// f16 copy (transposed into the kernel's faster layout), made once for the two.
void separate_backward(autograd::GradContext& ctx, const Tensor& x, const Tensor& gate,
                       const Tensor& up, const Tensor& d_gate, const Tensor& d_up) {
  const SharedF16Inputs shared_x;
  std::optional<autograd::GradTarget> dx, dwg, dwu;
  if (ctx.needs_grad(0)) dx = ctx.grad_target(0);
  if (ctx.needs_grad(1)) dwg = ctx.grad_target(1);
  if (ctx.needs_grad(2)) dwu = ctx.grad_target(2);
  detail::linear_grads(detail::describe_rows(d_up), x, up, dx ? dx->tensor : Tensor(),
                       dx ? dx->beta() : 0.0f, dwu ? dwu->tensor : Tensor(),
                       dwu ? dwu->beta() : 0.0f);
  detail::linear_grads(detail::describe_rows(d_gate), x, gate, dx ? dx->tensor : Tensor(), 1.0f,
                       dwg ? dwg->tensor : Tensor(), dwg ? dwg->beta() : 0.0f);
}

}  // namespace

Tensor gated_mlp(const Tensor& x, const Tensor& gate, const Tensor& up, const Tensor& down,
                 Activation kind, bool grouped) {
  VKF_REQUIRE(gated_mlp_applies(x, gate, up, down, grouped),
              "gated_mlp: internal: called where gated_mlp_applies() is false (x {}, gate {}, "
              "down {})",
              shape_str(x.shape()), shape_str(gate.shape()), shape_str(down.shape()));
  const std::vector<Tensor> weights = {gate, up};
  Shape y_shape = x.shape(), gate_shape = x.shape();
  y_shape.back() = down.dim(0);
  gate_shape.back() = gate.dim(0);
  Tensor y = Tensor::empty(y_shape);
  Tensor gu, g, u, h16;  // gu grouped; g and u separate
  {
    autograd::NoGradScope no_grad;
    if (grouped) {
      gu = detail::group_product(x, weights, {}, 2 * gate.dim(0));
      h16 = detail::gated_act_fused_value(gu, kind, true, DType::F16);
    } else {
      // As two linear layers in a SharedF16Inputs scope: x converted once for both.
      const SharedF16Inputs shared_x;
      g = Tensor::empty(gate_shape);
      u = Tensor::empty(gate_shape);
      detail::gemm(detail::describe_rows(x), detail::describe_readable(gate).transposed(),
                   detail::describe_rows(g), 1.0f, 0.0f);
      detail::gemm(detail::describe_rows(x), detail::describe_readable(up).transposed(),
                   detail::describe_rows(u), 1.0f, 0.0f);
      h16 = detail::gated_act_value(g, u, kind, DType::F16);
    }
    detail::gemm(detail::describe_rows(h16), detail::describe_readable(down).transposed(),
                 detail::describe_rows(y), 1.0f, 0.0f);
  }
  // Inputs {x, gate, up, down}: linear_concat's {x, W_0, W_1} first, as group_backward reads them.
  autograd::record_op(
      "gated_mlp", {x, gate, up, down}, {y},
      [x, weights, down, gu, g, u, h16, kind, grouped](autograd::GradContext& ctx) {
        const Tensor& dy = ctx.grad_output(0);
        if (!dy.defined()) return;
        const bool want_gu = ctx.needs_grad(0) || ctx.needs_grad(1) || ctx.needs_grad(2);
        Tensor dh = down_backward(ctx, dy, h16, down, 3, want_gu);
        if (!want_gu) return;
        Tensor d_gu, d_gate, d_up;
        {
          autograd::NoGradScope no_grad;
          if (grouped) {
            d_gu = detail::gated_act_fused_grad(gu, kind, true, dh, DType::F16);
          } else {
            std::tie(d_gate, d_up) = detail::gated_act_grads(g, u, kind, dh, DType::F16);
          }
          dh = Tensor();  // freed before the gate/up products run
        }
        if (grouped) {
          detail::group_backward(ctx, d_gu, x, weights, {});
        } else {
          separate_backward(ctx, x, weights[0], weights[1], d_gate, d_up);
        }
      });
  return y;
}

}  // namespace vkf::ops
