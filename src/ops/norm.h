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

// An RMSNorm of x's rows taken on the way into a product: rms_norm(x, weight, eps, one_plus)
// (Llama's input_layernorm before q, k and v; post_attention_layernorm before gate and up), as
// ops::normed_linear and ops::gated_linear (ops/decode.h) fold it in.
struct RowNorm {
  Tensor weight;  // f32 [in]
  float eps = 1e-6f;
  bool one_plus = false;  // weight 1 + w (Gemma)
};

namespace detail {
// Threads per row of the norm kernels (norm_rows.glsl's TPR, log2) for rows of h elements: about
// 8 elements per thread, a power of two from 1 to 256. Kernels that fold a norm into their own
// work (matmul_skinny_f16's NORM) reduce with the same threads, so their sums match.
uint32_t norm_threads_per_row_log2(int64_t h);
}  // namespace detail

}  // namespace vkf::ops
