// CPU reference for the fused LM head + cross-entropy (see linear_cross_entropy_ref.h).
#include "ops/linear_cross_entropy_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace vkf::ref {

LinearCrossEntropy linear_cross_entropy(const std::vector<double>& h, const std::vector<double>& w,
                                        int64_t rows, int64_t hidden, int64_t vocab,
                                        const std::vector<int64_t>& labels, double scale,
                                        double softcap, int64_t ignore_index, double dloss) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  LinearCrossEntropy r;
  r.dh.assign(static_cast<size_t>(rows * hidden), 0.0);
  r.dw.assign(static_cast<size_t>(vocab * hidden), 0.0);
  std::vector<double> y(static_cast<size_t>(vocab)), slope(static_cast<size_t>(vocab));
  for (int64_t n = 0; n < rows; ++n) {
    const int64_t label = labels[static_cast<size_t>(n)];
    if (label == ignore_index) continue;  // no loss, no gradient
    r.count += 1;
    const double* hn = h.data() + n * hidden;
    for (int64_t v = 0; v < vocab; ++v) {
      const double* wv = w.data() + v * hidden;
      double z = 0;
      for (int64_t k = 0; k < hidden; ++k) z += hn[k] * wv[k];
      double yv = z * scale, d = scale;
      if (softcap > 0) {
        const double t = std::tanh(yv / softcap);
        yv = softcap * t;
        d *= 1.0 - t * t;
      }
      y[static_cast<size_t>(v)] = yv;
      slope[static_cast<size_t>(v)] = d;
    }
    const bool valid = label >= 0 && label < vocab;
    const double m = *std::max_element(y.begin(), y.end());
    double s = 0;
    for (double yv : y) s += std::exp(yv - m);
    const double lse = m + std::log(s);
    r.loss_sum += valid ? lse - y[static_cast<size_t>(label)] : nan;
    for (int64_t v = 0; v < vocab; ++v) {
      const double p = std::exp(y[static_cast<size_t>(v)] - lse) - (v == label ? 1.0 : 0.0);
      const double dz = valid ? p * dloss * slope[static_cast<size_t>(v)] : nan;
      const double* wv = w.data() + v * hidden;
      double* dwv = r.dw.data() + v * hidden;
      double* dhn = r.dh.data() + n * hidden;
      for (int64_t k = 0; k < hidden; ++k) {
        dhn[k] += dz * wv[k];
        dwv[k] += dz * hn[k];
      }
    }
  }
  return r;
}

}  // namespace vkf::ref
