// Several linear layers on one input as one product: the q, k and v projections of an attention
// block, the gate and up projections of a gated MLP. Three products of 576, 192 and 192 outputs
// (or two of 1536) each leave part of a GPU idle and their input gradients add up in place one
// after another; one product of 960 (3072) outputs and one input gradient of depth 960 (3072)
// run faster (bench/RESULTS.md, fifteenth session).
#pragma once

#include <cstdint>
#include <vector>

#include "core/autograd.h"
#include "core/tensor.h"

namespace vkf::ops {

// y = x [W_0; ...; W_{n-1}]^T + [b_0, ..., b_{n-1}]: the outputs of n linear layers on x side by
// side, [..., N_0 + ... + N_{n-1}], for weights W_i [N_i, in] (f32) and biases b_i [N_i] (all
// given or none). The product reads the weights stacked into a transient copy, which the
// backward makes again rather than keeping it alive between the passes. Differentiable in x and
// every W_i and b_i: dx = dy [W_0; ...] (one product), dW_i the rows of dy^T x that are W_i's.
Tensor linear_concat(const Tensor& x, const std::vector<Tensor>& weights,
                     const std::vector<Tensor>& biases = {});

// The same product with its outputs apart: y_i = x W_i^T + b_i as contiguous tensors, copied out
// of the product's transient [..., sum N_i] output (which is not kept for the backward: the
// tape holds only the y_i, as it would for n separate linear layers). The backward writes the
// y_i's gradients side by side (one without a gradient as zeros) and runs linear_concat's
// products.
std::vector<Tensor> linear_split(const Tensor& x, const std::vector<Tensor>& weights,
                                 const std::vector<Tensor>& biases = {});

namespace detail {
// The ops' product and backward for an op built on them (ops::gated_mlp). group_product: y = x
// [W_0; ...]^T + biases into a new [..., out_features] tensor, recording nothing. group_backward:
// the gradients for the output's gradient g into ctx's inputs {x, W_0, ..., b_0, ...}; g may be
// an f16 copy (no biases then), which the products read as it is.
Tensor group_product(const Tensor& x, const std::vector<Tensor>& weights,
                     const std::vector<Tensor>& biases, int64_t out_features);
void group_backward(autograd::GradContext& ctx, const Tensor& g, const Tensor& x,
                    const std::vector<Tensor>& weights, const std::vector<Tensor>& biases);
}  // namespace detail

}  // namespace vkf::ops
