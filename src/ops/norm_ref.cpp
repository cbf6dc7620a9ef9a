// CPU double references for RMSNorm and LayerNorm (see norm_ref.h).
//
// The backward is derived by hand: with xhat = (x - c) * r and y = xhat * w' + b, dxhat = dy * w',
//   rms   (c = 0, r = (mean(x^2) + eps)^-1/2):
//         dx = r * dxhat - x * r^3 * mean(dxhat * x)
//   layer (c = mean, r = (var + eps)^-1/2):
//         dx = r * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
//   dw = sum_rows dy * xhat, db = sum_rows dy.
#include "ops/norm_ref.h"

#include <cmath>

namespace vkf::ref {
namespace {

double scale_of(const std::vector<double>& w, int64_t j, bool one_plus) {
  if (w.empty()) return 1.0;
  return one_plus ? 1.0 + w[j] : w[j];
}

// Per-row centre c (0 for rms) and reciprocal standard deviation r.
void row_stats(const double* x, int64_t h, double eps, bool centred, double& c, double& r) {
  c = 0;
  if (centred) {
    for (int64_t j = 0; j < h; ++j) c += x[j];
    c /= static_cast<double>(h);
  }
  double m2 = 0;
  for (int64_t j = 0; j < h; ++j) m2 += (x[j] - c) * (x[j] - c);
  r = 1.0 / std::sqrt(m2 / static_cast<double>(h) + eps);
}

std::vector<double> forward(const std::vector<double>& x, const std::vector<double>& w,
                            const std::vector<double>& b, int64_t rows, int64_t h, double eps,
                            bool centred, bool one_plus) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < rows; ++i) {
    const double* xr = x.data() + i * h;
    double c, r;
    row_stats(xr, h, eps, centred, c, r);
    for (int64_t j = 0; j < h; ++j)
      y[i * h + j] = (xr[j] - c) * r * scale_of(w, j, one_plus) + (b.empty() ? 0.0 : b[j]);
  }
  return y;
}

NormGrads backward(const std::vector<double>& x, const std::vector<double>& w, bool has_bias,
                   const std::vector<double>& dy, int64_t rows, int64_t h, double eps, bool centred,
                   bool one_plus) {
  NormGrads g;
  g.dx.assign(x.size(), 0.0);
  if (!w.empty()) g.dw.assign(h, 0.0);
  if (has_bias) g.db.assign(h, 0.0);
  const double hd = static_cast<double>(h);
  for (int64_t i = 0; i < rows; ++i) {
    const double* xr = x.data() + i * h;
    const double* gr = dy.data() + i * h;
    double c, r;
    row_stats(xr, h, eps, centred, c, r);
    double mean_d = 0, mean_dx = 0;
    for (int64_t j = 0; j < h; ++j) {
      const double d = gr[j] * scale_of(w, j, one_plus);
      const double xhat = (xr[j] - c) * r;
      mean_d += d;
      mean_dx += d * xhat;
      if (!w.empty()) g.dw[j] += gr[j] * xhat;
      if (has_bias) g.db[j] += gr[j];
    }
    mean_d /= hd;
    mean_dx /= hd;
    for (int64_t j = 0; j < h; ++j) {
      const double d = gr[j] * scale_of(w, j, one_plus);
      const double xhat = (xr[j] - c) * r;
      // For rms, mean(d * x) * r^2 * x * r == mean(d * xhat) * xhat * r: one formula for both.
      g.dx[i * h + j] = r * (d - (centred ? mean_d : 0.0) - xhat * mean_dx);
    }
  }
  return g;
}

}  // namespace

std::vector<double> rms_norm(const std::vector<double>& x, const std::vector<double>& w,
                             int64_t rows, int64_t h, double eps, bool one_plus) {
  return forward(x, w, {}, rows, h, eps, false, one_plus);
}

NormGrads rms_norm_backward(const std::vector<double>& x, const std::vector<double>& w,
                            const std::vector<double>& dy, int64_t rows, int64_t h, double eps,
                            bool one_plus) {
  return backward(x, w, false, dy, rows, h, eps, false, one_plus);
}

std::vector<double> layer_norm(const std::vector<double>& x, const std::vector<double>& w,
                               const std::vector<double>& b, int64_t rows, int64_t h, double eps) {
  return forward(x, w, b, rows, h, eps, true, false);
}

NormGrads layer_norm_backward(const std::vector<double>& x, const std::vector<double>& w,
                              const std::vector<double>& b, const std::vector<double>& dy,
                              int64_t rows, int64_t h, double eps) {
  return backward(x, w, !b.empty(), dy, rows, h, eps, true, false);
}

}  // namespace vkf::ref
