// CPU reference for soft-capping (see softcap_ref.h).
#include "ops/softcap_ref.h"

#include <cmath>

namespace vkf::ref {

std::vector<double> softcap(const std::vector<double>& x, double cap) {
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = cap * std::tanh(x[i] / cap);
  return y;
}

std::vector<double> softcap_backward(const std::vector<double>& x, const std::vector<double>& dy,
                                     double cap) {
  std::vector<double> dx(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double t = std::tanh(x[i] / cap);
    dx[i] = dy[i] * (1 - t * t);
  }
  return dx;
}

}  // namespace vkf::ref
