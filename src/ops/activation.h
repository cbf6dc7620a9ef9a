// Activation functions of HF configs (`hidden_act`) and the gated MLP forms built on them, for f32
// tensors of any shape. All differentiable; the gated forms run one fused kernel forward and one
// fused kernel backward (both input gradients in one pass).
#pragma once

#include <string_view>
#include <utility>

#include "core/tensor.h"

namespace vkf::ops {

// The formulas, as transformers' ACT2FN computes them:
//   SiLU       x * sigmoid(x)                                   "silu", "swish"
//   GELU       x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))         "gelu", "gelu_python"
//   GELUTanh   0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  "gelu_pytorch_tanh", "gelu_new",
//              "gelu_fast", "gelu_accurate", "gelu_python_tanh" (the same function; transformers'
//              versions differ only in fp32 rounding)
//   ReLU       max(x, 0)                                        "relu"
//   QuickGELU  x * sigmoid(1.702 x)                             "quick_gelu"
// The values are the kernels' spec-constant codes (activation.glsl).
enum class Activation : uint32_t { SiLU = 0, GELU = 1, GELUTanh = 2, ReLU = 3, QuickGELU = 4 };

// Maps an HF config's activation name (see above) to its formula; any other name is a vkf::Error
// listing the supported names.
Activation parse_activation(std::string_view hf_name);
// A canonical HF name of each kind ("silu", "gelu", "gelu_pytorch_tanh", "relu", "quick_gelu").
const char* activation_name(Activation kind);

Tensor activation(const Tensor& x, Activation kind);
Tensor silu(const Tensor& x);
Tensor gelu(const Tensor& x);
Tensor gelu_tanh(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor quick_gelu(const Tensor& x);

// act(gate) * up for gate and up of one shape: SwiGLU with SiLU, GeGLU with GELU or GELUTanh
// (the MLP of Llama, Mistral, Qwen, Gemma: down(act(gate(x)) * up(x))).
Tensor gated_act(const Tensor& gate, const Tensor& up, Activation kind);

// The same on one fused projection gate_up [..., 2*I] -> [..., I]: the first half of the last
// dimension is the gate when gate_first (Phi-3's gate_up_proj: `gate, up = chunk(2, dim=-1)`),
// the second half otherwise.
Tensor gated_act_fused(const Tensor& gate_up, Activation kind, bool gate_first = true);

namespace detail {
// gated_act_fused's two kernels without the tape: the output in `out_dtype` (f32, or f16: the
// f32 values rounded as Tensor::to rounds them, for ops::gated_projection's tensor-core product),
// and gate_up's gradient for the output's gradient dy (f32, or f16 likewise: ops::gated_mlp).
Tensor gated_act_fused_value(const Tensor& gate_up, Activation kind, bool gate_first,
                             DType out_dtype);
Tensor gated_act_fused_grad(const Tensor& gate_up, Activation kind, bool gate_first,
                            const Tensor& dy, DType out_dtype = DType::F32);
// gated_act's kernels likewise, on separate gate and up tensors of one shape (ops::gated_mlp).
Tensor gated_act_value(const Tensor& gate, const Tensor& up, Activation kind, DType out_dtype);
std::pair<Tensor, Tensor> gated_act_grads(const Tensor& gate, const Tensor& up, Activation kind,
                                          const Tensor& dy, DType out_dtype);
}  // namespace detail

}  // namespace vkf::ops
