// CPU reference for activations (see activation_ref.h).
#include "ops/activation_ref.h"

#include <cmath>
#include <numbers>

namespace vkf::ref {
namespace {

double sigmoid(double t) { return 1.0 / (1.0 + std::exp(-t)); }

constexpr double kTanhScale = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kCubic = 0.044715;
constexpr double kQuick = 1.702;

}  // namespace

double act(ops::Activation kind, double x) {
  switch (kind) {
    case ops::Activation::SiLU: return x * sigmoid(x);
    case ops::Activation::GELU: return 0.5 * x * std::erfc(-x / std::numbers::sqrt2);
    case ops::Activation::GELUTanh:
      return 0.5 * x * (1.0 + std::tanh(kTanhScale * (x + kCubic * x * x * x)));
    case ops::Activation::ReLU: return x > 0.0 ? x : 0.0;
    case ops::Activation::QuickGELU: return x * sigmoid(kQuick * x);
  }
  return 0.0;
}

double act_grad(ops::Activation kind, double x) {
  switch (kind) {
    case ops::Activation::SiLU: {
      const double s = sigmoid(x);
      return s + x * s * (1.0 - s);
    }
    case ops::Activation::GELU: {
      // Phi(x) + x * phi(x), phi the standard normal density.
      const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi);
      return 0.5 * std::erfc(-x / std::numbers::sqrt2) + x * pdf;
    }
    case ops::Activation::GELUTanh: {
      const double u = kTanhScale * (x + kCubic * x * x * x);
      const double t = std::tanh(u);
      const double du = kTanhScale * (1.0 + 3.0 * kCubic * x * x);
      return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
    }
    case ops::Activation::ReLU: return x > 0.0 ? 1.0 : 0.0;
    case ops::Activation::QuickGELU: {
      const double s = sigmoid(kQuick * x);
      return s + kQuick * x * s * (1.0 - s);
    }
  }
  return 0.0;
}

std::vector<double> activation(ops::Activation kind, const std::vector<double>& x) {
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = act(kind, x[i]);
  return y;
}

std::vector<double> activation_backward(ops::Activation kind, const std::vector<double>& x,
                                        const std::vector<double>& dy) {
  std::vector<double> dx(x.size());
  for (size_t i = 0; i < x.size(); ++i) dx[i] = dy[i] * act_grad(kind, x[i]);
  return dx;
}

std::vector<double> gated(ops::Activation kind, const std::vector<double>& gate,
                          const std::vector<double>& up) {
  std::vector<double> y(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) y[i] = act(kind, gate[i]) * up[i];
  return y;
}

void gated_backward(ops::Activation kind, const std::vector<double>& gate,
                    const std::vector<double>& up, const std::vector<double>& dy,
                    std::vector<double>& d_gate, std::vector<double>& d_up) {
  d_gate.resize(gate.size());
  d_up.resize(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) {
    d_gate[i] = dy[i] * up[i] * act_grad(kind, gate[i]);
    d_up[i] = dy[i] * act(kind, gate[i]);
  }
}

void split_halves(const std::vector<double>& x, int64_t inner, std::vector<double>& first,
                  std::vector<double>& second) {
  const size_t rows = x.size() / static_cast<size_t>(2 * inner);
  first.clear();
  second.clear();
  for (size_t r = 0; r < rows; ++r) {
    const auto row = x.begin() + static_cast<int64_t>(r) * 2 * inner;
    first.insert(first.end(), row, row + inner);
    second.insert(second.end(), row + inner, row + 2 * inner);
  }
}

std::vector<double> join_halves(const std::vector<double>& first, const std::vector<double>& second,
                                int64_t inner) {
  std::vector<double> out;
  const size_t rows = first.size() / static_cast<size_t>(inner);
  for (size_t r = 0; r < rows; ++r) {
    const auto at = static_cast<int64_t>(r) * inner;
    out.insert(out.end(), first.begin() + at, first.begin() + at + inner);
    out.insert(out.end(), second.begin() + at, second.begin() + at + inner);
  }
  return out;
}

}  // namespace vkf::ref
