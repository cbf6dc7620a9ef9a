// CPU reference for softmax (see softmax_ref.h).
#include "ops/softmax_ref.h"

#include <algorithm>
#include <cmath>

namespace vkf::ref {

std::vector<double> log_softmax(const std::vector<double>& x, int64_t len) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / static_cast<size_t>(len); ++r) {
    const double* row = x.data() + r * len;
    const double m = *std::max_element(row, row + len);
    double s = 0.0;
    for (int64_t i = 0; i < len; ++i) s += std::exp(row[i] - m);
    const double lse = m + std::log(s);
    for (int64_t i = 0; i < len; ++i) y[r * len + i] = row[i] - lse;
  }
  return y;
}

std::vector<double> softmax(const std::vector<double>& x, int64_t len) {
  std::vector<double> y = log_softmax(x, len);
  for (double& v : y) v = std::exp(v);
  return y;
}

// d/dx_j of sum_i dy_i p_i = p_j (dy_j - sum_i dy_i p_i).
std::vector<double> softmax_backward(const std::vector<double>& x, const std::vector<double>& dy,
                                     int64_t len) {
  const std::vector<double> p = softmax(x, len);
  std::vector<double> dx(x.size());
  for (size_t r = 0; r < x.size() / static_cast<size_t>(len); ++r) {
    double dot = 0.0;
    for (int64_t i = 0; i < len; ++i) dot += dy[r * len + i] * p[r * len + i];
    for (int64_t i = 0; i < len; ++i) dx[r * len + i] = p[r * len + i] * (dy[r * len + i] - dot);
  }
  return dx;
}

// d/dx_j of sum_i dy_i (x_i - lse) = dy_j - p_j sum_i dy_i.
std::vector<double> log_softmax_backward(const std::vector<double>& x,
                                         const std::vector<double>& dy, int64_t len) {
  const std::vector<double> p = softmax(x, len);
  std::vector<double> dx(x.size());
  for (size_t r = 0; r < x.size() / static_cast<size_t>(len); ++r) {
    double total = 0.0;
    for (int64_t i = 0; i < len; ++i) total += dy[r * len + i];
    for (int64_t i = 0; i < len; ++i) dx[r * len + i] = dy[r * len + i] - p[r * len + i] * total;
  }
  return dx;
}

}  // namespace vkf::ref
