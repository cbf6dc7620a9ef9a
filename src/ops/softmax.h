// Softmax and log-softmax over the last dimension of f32 tensors (attention probabilities, token
// log-probabilities). Numerically stable (the row maximum is subtracted), fp32 statistics, one
// fixed reduction order per row; rows may be as short as 1 or as long as a vocabulary (128256).
// Differentiable.
#pragma once

#include "core/tensor.h"

namespace vkf::ops {

Tensor softmax(const Tensor& x);      // exp(x - max) / sum(exp(x - max)) along the last dim
Tensor log_softmax(const Tensor& x);  // (x - max) - log(sum(exp(x - max))) along the last dim

}  // namespace vkf::ops
