// Logit soft-capping: y = cap * tanh(x / cap), as Gemma 2 applies to its final logits.
#pragma once

#include "core/tensor.h"

namespace vkf::ops {

// Differentiable; f32, any shape (non-contiguous inputs are copied); cap > 0.
Tensor softcap(const Tensor& x, float cap);

}  // namespace vkf::ops
