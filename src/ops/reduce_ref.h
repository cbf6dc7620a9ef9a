// CPU reference (double) for sums and norms, written from the definitions, and for torch's
// clip_grad_norm_ (L2): total = sqrt(sum of squares of every gradient), each gradient multiplied
// by min(1, max_norm / (total + 1e-6)); GradScaler's check and unscale around it.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace vkf::ref {

double sum(const std::vector<double>& x);
double mean(const std::vector<double>& x);
// Sum over dimension `dim` (non-negative) of x with shape `shape`; the dimension is removed.
std::vector<double> sum_dim(const std::vector<double>& x, const Shape& shape, int dim);
// Gradient of sum(dy * sum_dim(x)) with respect to x: dy repeated along `dim`.
std::vector<double> sum_dim_backward(const std::vector<double>& dy, const Shape& shape, int dim);

double global_l2_norm(const std::vector<std::vector<double>>& tensors);
// Scales `grads` in place as torch.nn.utils.clip_grad_norm_ and returns the total norm.
double clip_grad_norm(std::vector<std::vector<double>>& grads, double max_norm);

// torch.amp.GradScaler on gradients of a loss scaled by 1 / inv_scale: whether any element is inf
// or NaN (found_inf), and the L2 norm of the unscaled gradients.
struct GradCheck {
  double norm = 0.0;
  bool found_inf = false;
};
GradCheck grad_norm_and_overflow(const std::vector<std::vector<double>>& grads, double inv_scale);
// GradScaler.unscale_ (multiplies by inv_scale) then clip_grad_norm, in place; returns the norm
// of the unscaled gradients.
double unscale_and_clip(std::vector<std::vector<double>>& grads, double inv_scale, double max_norm);

}  // namespace vkf::ref
