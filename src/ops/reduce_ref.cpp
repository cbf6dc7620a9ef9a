// CPU reference for sums and norms (see reduce_ref.h).
#include "ops/reduce_ref.h"

#include <algorithm>
#include <cmath>

namespace vkf::ref {

double sum(const std::vector<double>& x) {
  double s = 0.0;
  for (double v : x) s += v;
  return s;
}

double mean(const std::vector<double>& x) { return sum(x) / static_cast<double>(x.size()); }

// Views x as [outer, len, inner] around dimension dim.
static void split_around(const Shape& shape, int dim, int64_t& outer, int64_t& len, int64_t& inner) {
  outer = 1;
  inner = 1;
  for (int d = 0; d < dim; ++d) outer *= shape[d];
  for (size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  len = shape[dim];
}

std::vector<double> sum_dim(const std::vector<double>& x, const Shape& shape, int dim) {
  int64_t outer, len, inner;
  split_around(shape, dim, outer, len, inner);
  std::vector<double> out(static_cast<size_t>(outer * inner), 0.0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t l = 0; l < len; ++l)
      for (int64_t i = 0; i < inner; ++i) out[o * inner + i] += x[(o * len + l) * inner + i];
  return out;
}

std::vector<double> sum_dim_backward(const std::vector<double>& dy, const Shape& shape, int dim) {
  int64_t outer, len, inner;
  split_around(shape, dim, outer, len, inner);
  std::vector<double> dx(static_cast<size_t>(outer * len * inner));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t l = 0; l < len; ++l)
      for (int64_t i = 0; i < inner; ++i) dx[(o * len + l) * inner + i] = dy[o * inner + i];
  return dx;
}

double global_l2_norm(const std::vector<std::vector<double>>& tensors) {
  double s = 0.0;
  for (const auto& t : tensors)
    for (double v : t) s += v * v;
  return std::sqrt(s);
}

double clip_grad_norm(std::vector<std::vector<double>>& grads, double max_norm) {
  const double total = global_l2_norm(grads);
  const double coef = std::min(1.0, max_norm / (total + 1e-6));
  for (auto& g : grads)
    for (double& v : g) v *= coef;
  return total;
}

GradCheck grad_norm_and_overflow(const std::vector<std::vector<double>>& grads, double inv_scale) {
  GradCheck r;
  double s = 0.0;
  for (const auto& g : grads) {
    for (double v : g) {
      if (!std::isfinite(v)) r.found_inf = true;
      s += (v * inv_scale) * (v * inv_scale);
    }
  }
  r.norm = std::sqrt(s);
  return r;
}

double unscale_and_clip(std::vector<std::vector<double>>& grads, double inv_scale, double max_norm) {
  for (auto& g : grads)
    for (double& v : g) v *= inv_scale;
  return clip_grad_norm(grads, max_norm);
}

}  // namespace vkf::ref
