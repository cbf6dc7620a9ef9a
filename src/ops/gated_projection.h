// A gated MLP (SwiGLU, GeGLU) as differentiable ops for mixed-precision training on tensor cores:
// gated_projection, y = (act(gate) * up) W^T from a fused gate_up projection, and gated_mlp, the
// whole MLP from the gate and up weights (the product linear_concat makes of them) to y.
//
// Composed of gated_act_fused and linear, the f32 activation h = act(gate) * up is stored, kept
// for the backward, and rounded to an f16 copy by each of the two products that read it (the
// forward y = h W^T, and dW = G^T h). Here the activation kernel stores h in f16 straight away
// (the same rounding, so the same bits) and both products read that: no f32 h, no conversions of
// it, and the tape keeps half the bytes (1B shape: 128 MiB a layer instead of 256). gated_mlp
// also writes the gate/up gradient in f16 for the two products that read it (the input and
// weight gradients of gate and up), where the composed form writes it in f32 and they convert it.
// The results are bit for bit those of the composed ops.
#pragma once

#include "core/tensor.h"
#include "ops/activation.h"

namespace vkf::ops {

// Whether gated_projection() takes a gate_up [..., 2*I] product into `weight` [out, I] with this
// bias: f32 operands, no bias, and both products of the op on tensor cores with f16 operand
// copies under the current settings (ops::detail::tensor_core_product). Elsewhere the composed
// form runs as before.
// On by default: off with VKF_F16_ACTIVATIONS=0, set_gated_projection(false) or train_bench
// --no-f16-activations (for A/B timing; the same bits either way).
bool gated_projection_applies(const Tensor& gate_up, const Tensor& weight, const Tensor& bias);
// The same rule by shapes (memory plans): a gate_up of `rows` rows of 2 * inner into an [out,
// inner] f32 weight.
bool gated_projection_applies_to(int64_t rows, int64_t inner, int64_t out, bool bias);
void set_gated_projection(bool on);
bool gated_projection_enabled();

// linear(gated_act_fused(gate_up, kind, gate_first), weight) where gated_projection_applies():
// [..., out]. Gradients for gate_up and weight.
Tensor gated_projection(const Tensor& gate_up, Activation kind, bool gate_first,
                        const Tensor& weight);

// Whether gated_mlp() takes x [..., in] with gate and up [I, in] and down [out, I] (f32, no
// biases): gated_projection's rule, and the gate/up gradient's products on tensor cores.
// grouped: gate and up as one product (linear_concat's), else as two (two linear layers). On and
// off with gated_projection (VKF_F16_ACTIVATIONS), and off alone by set_gated_mlp(false).
bool gated_mlp_applies(const Tensor& x, const Tensor& gate, const Tensor& up, const Tensor& down,
                       bool grouped);
bool gated_mlp_applies_to(int64_t rows, int64_t in, int64_t inner, int64_t out, bool grouped);
void set_gated_mlp(bool on);
bool gated_mlp_enabled();

// down(act(x gate^T) * (x up^T)) where gated_mlp_applies(): the same as gated_projection(
// linear_concat(x, {gate, up}), kind, true, down) (grouped), or as linear(gated_act(linear(x,
// gate), linear(x, up), kind), down) with the two first products in a SharedF16Inputs scope.
// Gradients for x and the three weights.
Tensor gated_mlp(const Tensor& x, const Tensor& gate, const Tensor& up, const Tensor& down,
                 Activation kind, bool grouped);

}  // namespace vkf::ops
