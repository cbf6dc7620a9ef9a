// CPU reference (double) for sums and norms, written from the definitions, and for torch's
// clip_grad_norm_ (L2): total = sqrt(sum of squares of every gradient), each gradient multiplied
// by min(1, max_norm / (total + 1e-6)).
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

}  // namespace vkf::ref
