// nn::linear: the single place every projection of every model goes through (y = x·Wᵀ + b with
// Hugging Face's [out, in] weight layout). LoRA adapters hook in here, so model code never calls
// ops::linear directly.
#pragma once

#include <string>

#include "core/tensor.h"

namespace vkf::nn {

// `name` is the HF module name (e.g. "model.layers.0.self_attn.q_proj"), for adapters and traces.
Tensor linear(const std::string& name, const Tensor& x, const Tensor& weight, const Tensor& bias = {});

}  // namespace vkf::nn
