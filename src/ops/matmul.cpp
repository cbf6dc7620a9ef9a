// matmul, matmul_into and linear: input validation, the forward products and their gradients
// (see matmul.h). Every gradient is a GEMM (or, for a bias, a column sum) written straight into
// the gradient buffer the tape hands out, accumulating there with beta = 1 when it already holds
// a gradient.
#include "ops/matmul.h"

#include <fmt/format.h>

#include <optional>
#include <string>

#include "core/autograd.h"
#include "ops/matmul_kernels.h"
#include "ops/matmul_relayout.h"
#include "vk/error.h"

namespace vkf::ops {
namespace {

using autograd::GradContext;
using autograd::GradTarget;
using detail::MatDesc;

struct Problem {
  Shape batch;  // the result's leading dimensions
  int64_t m = 0, n = 0, k = 0;
};

void check_operand(const char* op, const char* name, const Tensor& t, const char* layout) {
  const std::string what = fmt::format("{}: argument {}", op, name);
  check_tensor(t, what.c_str(), DType::F32);
  VKF_REQUIRE(t.rank() >= 2, "{}: argument {} must have rank >= 2 ({}), got shape {}", op, name,
              layout, shape_str(t.shape()));
  VKF_REQUIRE(t.numel() > 0,
              "{}: argument {} is empty (shape {}); operands need every dimension > 0", op, name,
              shape_str(t.shape()));
}

Problem check_matmul(const char* op, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  check_operand(op, "a", a, trans_a ? "[..., K, M] with trans_a" : "[..., M, K]");
  check_operand(op, "b", b, trans_b ? "[..., N, K] with trans_b" : "[..., K, N]");
  Problem p;
  p.m = trans_a ? a.dim(-1) : a.dim(-2);
  const int64_t ka = trans_a ? a.dim(-2) : a.dim(-1);
  const int64_t kb = trans_b ? b.dim(-1) : b.dim(-2);
  p.n = trans_b ? b.dim(-2) : b.dim(-1);
  VKF_REQUIRE(ka == kb,
              "{}: inner dimensions differ: a {} gives K = {} (trans_a = {}) but b {} gives K = {} "
              "(trans_b = {})",
              op, shape_str(a.shape()), ka, trans_a, shape_str(b.shape()), kb, trans_b);
  p.k = ka;
  p.batch.assign(a.shape().begin(), a.shape().end() - 2);
  if (b.rank() > 2) {
    const Shape bb(b.shape().begin(), b.shape().end() - 2);
    VKF_REQUIRE(bb == p.batch,
                "{}: batch dimensions differ: a {} has batch {} but b {} has batch {}; b must have "
                "a's batch dimensions or be rank 2 (shared by every batch entry)",
                op, shape_str(a.shape()), shape_str(p.batch), shape_str(b.shape()), shape_str(bb));
  }
  return p;
}

Shape result_shape(const Problem& p) {
  Shape s = p.batch;
  s.push_back(p.m);
  s.push_back(p.n);
  return s;
}

// op(x) as a single [batch * rows, cols] matrix, for sums over a batch; copies op(x) to a
// contiguous tensor when its rows are not evenly spaced across the batch.
MatDesc merged_rows(const Tensor& x, bool trans) {
  const MatDesc d = detail::describe_readable(x).transposed_if(trans);
  if (auto merged = d.rows_merged(); merged && merged->kernel_readable()) return *merged;
  Tensor copy = (trans ? x.transpose(-1, -2) : x).contiguous();
  return *detail::describe(copy)->rows_merged();
}

// With C = op(A) op(B) and G = dC: d op(A) = G op(B)^T and d op(B) = op(A)^T G; a transposed
// operand's gradient is the transpose of that, computed directly in its stored layout.
void matmul_backward(GradContext& ctx, const Tensor& a, const Tensor& b, bool trans_a,
                     bool trans_b) {
  const Tensor& g = ctx.grad_output(0);
  if (!g.defined()) return;
  const MatDesc gd = detail::describe_readable(g);
  const MatDesc op_a = detail::describe_readable(a).transposed_if(trans_a);
  const MatDesc op_b = detail::describe_readable(b).transposed_if(trans_b);
  if (ctx.needs_grad(0)) {
    const GradTarget t = ctx.grad_target(0);
    const MatDesc da = *detail::describe(t.tensor);
    if (!trans_a) {
      detail::gemm(gd, op_b.transposed(), da, 1.0f, t.beta());  // G op(B)^T
    } else {
      detail::gemm(op_b, gd.transposed(), da, 1.0f, t.beta());  // op(B) G^T
    }
  }
  if (ctx.needs_grad(1)) {
    const GradTarget t = ctx.grad_target(1);
    const MatDesc db = *detail::describe(t.tensor);
    if (b.rank() > 2 || op_a.batch == 1) {
      if (!trans_b) {
        detail::gemm(op_a.transposed(), gd, db, 1.0f, t.beta());  // op(A)^T G
      } else {
        detail::gemm(gd.transposed(), op_a, db, 1.0f, t.beta());  // G^T op(A)
      }
    } else {
      // A weight shared by the batch: its gradient sums over batch entries and rows alike, one
      // product over the stacked rows.
      const MatDesc af = merged_rows(a, trans_a), gf = merged_rows(g, false);
      if (!trans_b) {
        detail::gemm(af.transposed(), gf, db, 1.0f, t.beta());
      } else {
        detail::gemm(gf.transposed(), af, db, 1.0f, t.beta());
      }
    }
  }
}

}  // namespace

namespace detail {

void linear_grads(const MatDesc& gd32, const Tensor& x, const Tensor& weight, const Tensor& dx,
                  float dx_beta, const Tensor& dw, float dw_beta) {
  autograd::NoGradScope no_grad;
  // Both products read G: on tensor cores with f16 operands, convert it once for the two. An f16
  // x (ops::gated_projection's h) needs G in f16 beside it for dW to run on tensor cores.
  const bool shared_f16 =
      ((dx.defined() && dw.defined()) || x.dtype() == DType::F16) && f16_operands_active();
  // A G that is f16 already (ops::gated_mlp's gate/up gradient) is read as it is.
  const MatDesc gd =
      shared_f16 && gd32.t.dtype() != DType::F16 ? describe_rows(gd32.t.to(DType::F16)) : gd32;
  if (dx.defined()) {  // dx = G W
    // The shared copy keeps G row-major, the fast layout for dW's G^T but the slow one for
    // dx's A: where the device prefers "tn" (matmul_relayout.h), dx gets its own transposed
    // copy (bitwise the same product; 1B f16 step: one more pass over G, faster products).
    const MatDesc dxd = describe_rows(dx);
    std::optional<MatDesc> relaid;
    if (shared_f16 && f16_relayout_wanted(dxd, 1.0f, dx_beta, {}, gd32.cols))
      relaid = f16_operand_relaid(gd32, true);
    gemm(relaid ? *relaid : gd, describe_readable(weight), dxd, 1.0f, dx_beta);
  }
  if (dw.defined())  // dW = G^T x
    gemm(gd.transposed(), describe_rows(x), *describe(dw), 1.0f, dw_beta);
}

}  // namespace detail

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  const Problem p = check_matmul("matmul", a, b, trans_a, trans_b);
  Tensor out = Tensor::empty(result_shape(p));
  {
    autograd::NoGradScope no_grad;
    detail::gemm(detail::describe_readable(a).transposed_if(trans_a),
                 detail::describe_readable(b).transposed_if(trans_b), *detail::describe(out), 1.0f,
                 0.0f);
  }
  autograd::record_op("matmul", {a, b}, {out}, [a, b, trans_a, trans_b](GradContext& ctx) {
    matmul_backward(ctx, a, b, trans_a, trans_b);
  });
  return out;
}

void matmul_into(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, const Tensor& out,
                 float alpha, float beta, const Tensor& bias) {
  const Problem p = check_matmul("matmul_into", a, b, trans_a, trans_b);
  check_tensor(out, "matmul_into: argument out", DType::F32);
  const Shape want = result_shape(p);
  VKF_REQUIRE(out.shape() == want, "matmul_into: out has shape {} but the product is {}",
              shape_str(out.shape()), shape_str(want));
  if (bias.defined()) {
    check_tensor(bias, "matmul_into: argument bias", DType::F32, 1);
    VKF_REQUIRE(bias.dim(0) == p.n, "matmul_into: bias has shape {} but the product has N = {}",
                shape_str(bias.shape()), p.n);
  }
  autograd::NoGradScope no_grad;
  const MatDesc ad = detail::describe_readable(a).transposed_if(trans_a);
  const MatDesc bd = detail::describe_readable(b).transposed_if(trans_b);
  if (auto od = detail::describe(out)) {
    detail::gemm(ad, bd, *od, alpha, beta, bias);
    return;
  }
  // out's batch dimensions do not collapse to one stride: compute contiguously, then copy back.
  Tensor tmp = beta != 0.0f ? out.contiguous() : Tensor::empty(out.shape());
  detail::gemm(ad, bd, *detail::describe(tmp), alpha, beta, bias);
  out.copy_(tmp);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_tensor(x, "linear: argument x", DType::F32);
  VKF_REQUIRE(weight.defined() && (weight.dtype() == DType::F32 || weight.dtype() == DType::F16),
              "linear: argument weight must be f32 (or f16, an inference weight), got {}",
              weight.defined() ? dtype_name(weight.dtype()) : "an undefined tensor");
  VKF_REQUIRE(x.rank() >= 1, "linear: argument x must have rank >= 1 ([..., in]), got a scalar");
  VKF_REQUIRE(x.numel() > 0, "linear: argument x is empty (shape {})", shape_str(x.shape()));
  VKF_REQUIRE(weight.rank() == 2 && weight.numel() > 0,
              "linear: argument weight must be [out, in] with out, in > 0, got shape {}",
              shape_str(weight.shape()));
  const int64_t in = weight.dim(1), out_features = weight.dim(0);
  VKF_REQUIRE(x.dim(-1) == in,
              "linear: x {} has {} input features but weight {} ([out, in]) expects {}",
              shape_str(x.shape()), x.dim(-1), shape_str(weight.shape()), in);
  if (bias.defined()) {
    check_tensor(bias, "linear: argument bias", DType::F32, 1);
    VKF_REQUIRE(bias.dim(0) == out_features,
                "linear: bias has shape {} but weight {} has {} output features",
                shape_str(bias.shape()), shape_str(weight.shape()), out_features);
  }
  Shape y_shape = x.shape();
  y_shape.back() = out_features;
  Tensor y = Tensor::empty(y_shape);
  {
    autograd::NoGradScope no_grad;
    detail::gemm(detail::describe_rows(x), detail::describe_readable(weight).transposed(),
                 detail::describe_rows(y), 1.0f, 0.0f, bias);
  }
  autograd::record_op("linear", {x, weight, bias}, {y}, [x, weight](GradContext& ctx) {
    const Tensor& g = ctx.grad_output(0);
    if (!g.defined()) return;
    const MatDesc gd = detail::describe_rows(g);  // [rows, out]
    std::optional<GradTarget> dx, dw;
    if (ctx.needs_grad(0)) dx = ctx.grad_target(0);
    if (ctx.needs_grad(1)) dw = ctx.grad_target(1);
    detail::linear_grads(gd, x, weight, dx ? dx->tensor : Tensor(), dx ? dx->beta() : 0.0f,
                         dw ? dw->tensor : Tensor(), dw ? dw->beta() : 0.0f);
    if (ctx.needs_grad(2)) {
      const GradTarget t = ctx.grad_target(2);  // db = column sums of G
      detail::column_sum(gd, t.tensor, t.beta());
    }
  });
  return y;
}

struct SharedF16Inputs::Scope {
  detail::F16OperandReuse reuse;
  detail::F16OperandReuse::Use use{reuse};
};

SharedF16Inputs::SharedF16Inputs() : scope_(std::make_unique<Scope>()) {}

SharedF16Inputs::~SharedF16Inputs() = default;

}  // namespace vkf::ops
