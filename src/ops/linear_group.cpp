// linear_concat and linear_split (see linear_group.h).
#include "ops/linear_group.h"

#include <fmt/format.h>

#include <optional>
#include <string>

#include "core/autograd.h"
#include "core/tensor_kernels.h"
#include "ops/matmul_kernels.h"
#include "vk/error.h"

namespace vkf::ops {
namespace {

using autograd::GradContext;
using autograd::GradTarget;

// The rank-2 tensors (or rank-1: biases) stacked along their first dimension into a new one.
Tensor stack_rows(const std::vector<Tensor>& parts) {
  autograd::NoGradScope no_grad;
  int64_t rows = 0;
  for (const Tensor& t : parts) rows += t.dim(0);
  Shape shape = parts.front().shape();
  shape[0] = rows;
  Tensor out = Tensor::empty(shape);
  int64_t at = 0;
  for (const Tensor& t : parts) {
    out.slice(0, at, at + t.dim(0)).copy_(t);
    at += t.dim(0);
  }
  return out;
}

// Checks the arguments; returns the total number of outputs.
int64_t check_group(const char* op, const Tensor& x, const std::vector<Tensor>& weights,
                    const std::vector<Tensor>& biases) {
  const std::string xwhat = fmt::format("{}: argument x", op);
  check_tensor(x, xwhat.c_str(), DType::F32);
  VKF_REQUIRE(x.rank() >= 1 && x.numel() > 0,
              "{}: argument x must be a non-empty [..., in] tensor, got shape {}", op,
              shape_str(x.shape()));
  VKF_REQUIRE(!weights.empty(), "{}: no weights given", op);
  VKF_REQUIRE(biases.empty() || biases.size() == weights.size(),
              "{}: {} biases for {} weights; give one per weight or none", op, biases.size(),
              weights.size());
  const int64_t in = x.dim(-1);
  int64_t out_features = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const Tensor& w = weights[i];
    const std::string what = fmt::format("{}: weight {}", op, i);
    check_tensor(w, what.c_str(), DType::F32, 2);
    VKF_REQUIRE(w.dim(1) == in && w.dim(0) > 0,
                "{}: weight {} has shape {}, expected [out, {}] for x {}", op, i,
                shape_str(w.shape()), in, shape_str(x.shape()));
    if (!biases.empty()) {
      const std::string bwhat = fmt::format("{}: bias {}", op, i);
      check_tensor(biases[i], bwhat.c_str(), DType::F32, 1);
      VKF_REQUIRE(biases[i].dim(0) == w.dim(0),
                  "{}: bias {} has shape {} but weight {} has {} outputs", op, i,
                  shape_str(biases[i].shape()), i, w.dim(0));
    }
    out_features += w.dim(0);
  }
  return out_features;
}

std::vector<Tensor> group_inputs(const Tensor& x, const std::vector<Tensor>& weights,
                                 const std::vector<Tensor>& biases) {
  std::vector<Tensor> inputs{x};
  inputs.insert(inputs.end(), weights.begin(), weights.end());
  inputs.insert(inputs.end(), biases.begin(), biases.end());
  return inputs;
}

}  // namespace

namespace detail {

Tensor group_product(const Tensor& x, const std::vector<Tensor>& weights,
                     const std::vector<Tensor>& biases, int64_t out_features) {
  autograd::NoGradScope no_grad;
  Shape y_shape = x.shape();
  y_shape.back() = out_features;
  Tensor y = Tensor::empty(y_shape);
  const Tensor stacked = stack_rows(weights);
  const Tensor bias = biases.empty() ? Tensor() : stack_rows(biases);
  detail::gemm(detail::describe_rows(x), detail::describe_readable(stacked).transposed(),
               detail::describe_rows(y), 1.0f, 0.0f, bias);
  return y;
}

// dx = g [W_0; ...] in one product (the weights stacked again), dW = g^T x in one product whose
// rows are handed to each weight, db_i the column sums of g's columns of b_i.
void group_backward(GradContext& ctx, const Tensor& g, const Tensor& x,
                    const std::vector<Tensor>& weights, const std::vector<Tensor>& biases) {
  const size_t n = weights.size();
  VKF_REQUIRE(g.dtype() == DType::F32 || biases.empty(),
              "linear_concat: internal: an f16 output gradient with biases");
  bool any_weight = false;
  for (size_t i = 0; i < n; ++i) any_weight = any_weight || ctx.needs_grad(1 + i);
  // g as one [rows, sum N_i] matrix: the products' operand and the column sums' source.
  Tensor g2;
  {
    autograd::NoGradScope no_grad;
    g2 = (g.is_contiguous() ? g : g.contiguous()).reshape({g.numel() / g.dim(-1), g.dim(-1)});
  }
  std::optional<GradTarget> dx;
  if (ctx.needs_grad(0)) dx = ctx.grad_target(0);
  Tensor dw;
  if (any_weight) dw = Tensor::empty({g.dim(-1), x.dim(-1)});
  if (dx || any_weight) {
    // linear_grads reads the weight only for dx.
    const Tensor stacked = dx ? stack_rows(weights) : Tensor();
    detail::linear_grads(*detail::describe(g2), x, stacked, dx ? dx->tensor : Tensor(),
                         dx ? dx->beta() : 0.0f, dw, 0.0f);
  }
  int64_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t rows = weights[i].dim(0);
    if (ctx.needs_grad(1 + i)) ctx.add_grad(1 + i, dw.slice(0, at, at + rows));
    if (!biases.empty() && ctx.needs_grad(1 + n + i)) {
      const GradTarget t = ctx.grad_target(1 + n + i);
      autograd::NoGradScope no_grad;
      detail::column_sum(*detail::describe(g2.slice(1, at, at + rows)), t.tensor, t.beta());
    }
    at += rows;
  }
}

}  // namespace detail

Tensor linear_concat(const Tensor& x, const std::vector<Tensor>& weights,
                     const std::vector<Tensor>& biases) {
  const int64_t out_features = check_group("linear_concat", x, weights, biases);
  Tensor y = detail::group_product(x, weights, biases, out_features);
  autograd::record_op("linear_concat", group_inputs(x, weights, biases), {y},
                      [x, weights, biases](GradContext& ctx) {
                        const Tensor& g = ctx.grad_output(0);
                        if (g.defined()) detail::group_backward(ctx, g, x, weights, biases);
                      });
  return y;
}

std::vector<Tensor> linear_split(const Tensor& x, const std::vector<Tensor>& weights,
                                 const std::vector<Tensor>& biases) {
  const int64_t out_features = check_group("linear_split", x, weights, biases);
  std::vector<Tensor> out;
  {
    const Tensor y = detail::group_product(x, weights, biases, out_features);
    autograd::NoGradScope no_grad;
    int64_t at = 0;
    for (const Tensor& w : weights) {
      out.push_back(y.slice(y.rank() - 1, at, at + w.dim(0)).contiguous());
      at += w.dim(0);
    }
  }
  autograd::record_op("linear_split", group_inputs(x, weights, biases), out,
                      [x, weights, biases, out_features](GradContext& ctx) {
                        bool any = false;
                        for (size_t i = 0; i < weights.size(); ++i)
                          any = any || ctx.grad_output(i).defined();
                        if (!any) return;
                        // The outputs' gradients side by side: the gradient of the product's whole
                        // output.
                        Shape shape = x.shape();
                        shape.back() = out_features;
                        Tensor g = Tensor::empty(shape);
                        const int last = g.rank() - 1;
                        int64_t at = 0;
                        for (size_t i = 0; i < weights.size(); ++i) {
                          const Tensor piece = g.slice(last, at, at + weights[i].dim(0));
                          if (ctx.grad_output(i).defined()) {
                            vkf::detail::copy_strided(ctx.grad_output(i), piece);
                          } else {
                            vkf::detail::fill(piece, 0.0f);
                          }
                          at += weights[i].dim(0);
                        }
                        detail::group_backward(ctx, g, x, weights, biases);
                      });
  return out;
}

}  // namespace vkf::ops
