// Elementwise arithmetic on f32 tensors with numpy/torch broadcasting (shapes aligned from the
// right; a size-1 or missing dimension stretches; at most 6 dimensions after merging the ones
// laid out alike). Inputs may be any strided views; outputs are new contiguous tensors. All ops
// are differentiable: the gradient of a broadcast input is summed over its broadcast dimensions
// in a fixed order (ops::sum_to_shape), so it is deterministic.
#pragma once

#include "core/tensor.h"

namespace vkf::ops {

Tensor add(const Tensor& a, const Tensor& b);  // a + b
Tensor sub(const Tensor& a, const Tensor& b);  // a - b
Tensor mul(const Tensor& a, const Tensor& b);  // a * b
Tensor scale(const Tensor& x, float s);        // x * s

// x [..., N] + bias [N]: the bias of a linear layer (its gradient sums over every row).
Tensor bias_add(const Tensor& x, const Tensor& bias);

// x + y for two tensors of one shape: the residual stream of a transformer block (h = h + f(h)).
// Same as add() but refuses broadcasting, which here would only hide a shape bug.
Tensor residual_add(const Tensor& x, const Tensor& y);

// x broadcast to `shape` (torch's expand, materialized as a contiguous copy).
Tensor expand(const Tensor& x, const Shape& shape);

// dst += src in place, src broadcast to dst's shape; dst contiguous. Not recorded by autodiff:
// for accumulators (gradient sums, running totals) that live outside the tape.
void add_(const Tensor& dst, const Tensor& src);

// The shape a binary op on shapes a and b produces, or a vkf::Error naming `op`.
Shape broadcast_shape(const Shape& a, const Shape& b, const char* op = "broadcast");

}  // namespace vkf::ops
