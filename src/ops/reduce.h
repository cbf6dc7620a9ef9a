// Sums and norms of f32 tensors, all deterministic: every reduction runs in a fixed order that
// depends only on the shapes (no atomics), so the same inputs give the same bits. Large sums take
// two levels (fixed chunks of 4096 elements, then one pass over the chunk sums). Results stay on
// the device; nothing here waits for the GPU.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace vkf::ops {

// Sum and mean of every element: a rank-0 tensor (shape []). Differentiable.
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);

// Sum over one dimension (negative counts from the end; sum(x, -1) sums each row). The dimension
// is removed, or kept with size 1 when keepdim. Differentiable.
Tensor sum(const Tensor& x, int dim, bool keepdim = false);

// Sums x over the dimensions along which `shape` was broadcast to x's shape (torch's
// Tensor.sum_to_size): the gradient of a broadcast. `shape` must broadcast to x's shape.
// Differentiable (its gradient is ops::expand).
Tensor sum_to_shape(const Tensor& x, const Shape& shape);

// sqrt of the sum of squares of every element of every tensor: a rank-0 tensor. Sums of 4096-
// element chunks of every tensor in order (one dispatch over the list), then one fixed-order pass
// over all of them. Differentiable (d/dx = x / norm, and
// 0 where the norm is 0).
Tensor global_l2_norm(const std::vector<Tensor>& tensors);

// torch.nn.utils.clip_grad_norm_ with the L2 norm: returns the total norm of `grads` (rank 0) and
// multiplies every gradient in place by min(1, max_norm / (total_norm + 1e-6)), always (a factor
// of exactly 1 when the norm is small), with the factor computed on the GPU from the norm in
// device memory. Gradients must be contiguous. Not recorded by autodiff.
Tensor clip_grad_norm_(const std::vector<Tensor>& grads, float max_norm);

// Mixed precision with dynamic loss scaling (torch.amp.GradScaler), for gradients of a loss
// scaled by S. One read of every gradient gives a [2] tensor: [0] the L2 norm of the unscaled
// gradients g * inv_scale (inv_scale = 1/S), as clip_grad_norm_ measures them after
// GradScaler.unscale_, and [1] found_inf: 1 when any element of any g is inf or NaN, else 0.
// Gradients must be non-empty contiguous f32; nothing is modified. Not recorded by autodiff.
Tensor grad_norm_and_overflow(const std::vector<Tensor>& grads, float inv_scale);

// GradScaler.unscale_ then clip_grad_norm_ in one pass, in place (a training step folds the same
// scaling into AdamW instead: ops::StepGate::clip_norm): every g becomes
// (g * inv_scale) * min(1, max_norm / (norm + 1e-6)), the two products rounded separately as
// torch's two in-place multiplies are, with `norm` (a one-element device tensor, e.g. element 0
// of grad_norm_and_overflow's result) read on the GPU. Not recorded by autodiff.
void unscale_and_clip_(const std::vector<Tensor>& grads, float inv_scale, const Tensor& norm,
                       float max_norm);

// x *= s, in place, with s a one-element f32 tensor read on the GPU (no host round trip); x is
// contiguous f32. Not recorded by autodiff.
void scale_by_device_scalar_(const Tensor& x, const Tensor& s);

}  // namespace vkf::ops
