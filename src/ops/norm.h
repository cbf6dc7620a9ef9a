// Normalization over the last dimension: RMSNorm (Llama, Qwen, Gemma's 1 + w form) and LayerNorm
// (torch.nn.LayerNorm semantics), forward and backward, statistics in fp32 as transformers
// computes them. One reduction per row in a fixed order, so results are bitwise reproducible.
//
// The same calls serve per-head q/k norm (Qwen3: x [B, T, heads, D], weight [D]) and
// whole-projection q/k norm (OLMo2: x [B, T, heads * D], weight [heads * D]): both normalize the
// last dimension. Non-contiguous inputs are copied to contiguous first (differentiably).
#pragma once

#include "core/tensor.h"

namespace vkf::ops {

// y = x / sqrt(mean(x^2, -1) + eps) * w       (one_plus_weight: * (1 + w), as Gemma)
// x: f32 [..., H]; weight: f32 [H], or undefined for no scaling. Returns a new f32 [..., H].
// Differentiable w.r.t. x and weight.
Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps, bool one_plus_weight = false);

// y = (x - mean) / sqrt(var + eps) * w + b, var biased (divides by H), over the last dimension.
// x: f32 [..., H]; weight, bias: f32 [H], each may be undefined (no scale / no shift).
// Differentiable w.r.t. x, weight and bias.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps);

}  // namespace vkf::ops
