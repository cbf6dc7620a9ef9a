// Double references for rotary embeddings (see rope_ref.h). The frequency formulas follow the
// papers' definitions as transformers states them: theta_j = base^(-2j/d);
//   linear:   theta_j / s
//   dynamic:  base' = base * (s * L / L0 - (s - 1))^(d / (d - 2)),  L = max(seq_len, L0)
//   yarn:     blend of theta_j / s (interpolation) and theta_j (extrapolation) by a linear ramp
//             over the dimensions whose wavelength turns between beta_slow and beta_fast times in
//             the original context; attention scaled by 0.1 ln(s) + 1 (or the mscale ratio)
//   longrope: theta_j / ext_j, ext = long factors past the original context, else short
//   llama3:   wavelength 2 pi / theta_j above L0 / low: divided by s; below L0 / high: kept;
//             between: (1 - a) theta_j / s + a theta_j, a = (L0 / wavelength - low) / (high - low)
#include "ops/rope_ref.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

namespace vkf::ref {
namespace {

constexpr double kTwoPi = 2 * std::numbers::pi;

std::vector<double> base_freqs(double base, int64_t d) {
  std::vector<double> f(static_cast<size_t>(d / 2));
  for (int64_t j = 0; j < d / 2; ++j)
    f[j] = std::pow(base, -2.0 * static_cast<double>(j) / static_cast<double>(d));
  return f;
}

double yarn_mscale(double s, double m) {
  return s <= 1 ? 1.0 : 1.0 + 0.1 * m * std::log(s);
}

}  // namespace

RopeFreqs rope_inv_freq(const ops::RopeConfig& cfg, int64_t seq_len) {
  const auto d =
      static_cast<int64_t>(static_cast<double>(cfg.head_dim) * cfg.partial_rotary_factor);
  const int64_t l0 = cfg.original_max_position_embeddings > 0 ? cfg.original_max_position_embeddings
                                                              : cfg.max_position_embeddings;
  double s = cfg.factor;
  if (s == 0) s = static_cast<double>(cfg.max_position_embeddings) / static_cast<double>(l0);
  RopeFreqs r;
  if (cfg.type == "default") {
    r.inv_freq = base_freqs(cfg.theta, d);
  } else if (cfg.type == "linear") {
    r.inv_freq = base_freqs(cfg.theta, d);
    for (auto& f : r.inv_freq) f /= s;
  } else if (cfg.type == "dynamic") {
    const double l_train = static_cast<double>(cfg.max_position_embeddings);
    const double l = std::max(static_cast<double>(seq_len), l_train);
    const double stretched =
        cfg.theta *
        std::pow(s * l / l_train - (s - 1), static_cast<double>(d) / static_cast<double>(d - 2));
    r.inv_freq = base_freqs(stretched, d);
  } else if (cfg.type == "yarn") {
    const double fast = cfg.beta_fast != 0 ? cfg.beta_fast : 32,
                 slow = cfg.beta_slow != 0 ? cfg.beta_slow : 1;
    // Dimension index whose frequency makes `turns` full turns over the original context l0:
    // l0 * base^(-2j/d) = turns * 2 pi  =>  j = d * ln(l0 / (2 pi turns)) / (2 ln base).
    auto dim_for_turns = [&](double turns) {
      return static_cast<double>(d) * std::log(static_cast<double>(l0) / (kTwoPi * turns)) /
             (2 * std::log(cfg.theta));
    };
    double lo = dim_for_turns(fast), hi = dim_for_turns(slow);
    if (cfg.truncate) {
      lo = std::floor(lo);
      hi = std::ceil(hi);
    }
    lo = std::max(lo, 0.0);
    hi = std::min(hi, static_cast<double>(d - 1));
    if (hi == lo) hi += 0.001;
    const auto theta = base_freqs(cfg.theta, d);
    r.inv_freq.resize(theta.size());
    for (size_t j = 0; j < theta.size(); ++j) {
      // ramp 0 below lo (keep the original frequency), 1 above hi (interpolate fully).
      const double ramp = std::clamp((static_cast<double>(j) - lo) / (hi - lo), 0.0, 1.0);
      r.inv_freq[j] = theta[j] * (1 - ramp) + theta[j] / s * ramp;
    }
    if (cfg.attention_factor) {
      r.attention_scaling = *cfg.attention_factor;
    } else if (cfg.mscale.value_or(0) != 0 && cfg.mscale_all_dim.value_or(0) != 0) {
      r.attention_scaling = yarn_mscale(s, *cfg.mscale) / yarn_mscale(s, *cfg.mscale_all_dim);
    } else {
      r.attention_scaling = yarn_mscale(s, 1);
    }
  } else if (cfg.type == "longrope") {
    const auto& ext = seq_len > l0 ? cfg.long_factor : cfg.short_factor;
    r.inv_freq = base_freqs(cfg.theta, d);
    for (size_t j = 0; j < r.inv_freq.size(); ++j) r.inv_freq[j] /= ext.at(j);
    r.attention_scaling = cfg.attention_factor ? *cfg.attention_factor
                          : s <= 1             ? 1.0
                                   : std::sqrt(1 + std::log(s) / std::log(static_cast<double>(l0)));
  } else if (cfg.type == "llama3") {
    const double long_wavelen = static_cast<double>(l0) / cfg.low_freq_factor;
    const double short_wavelen = static_cast<double>(l0) / cfg.high_freq_factor;
    r.inv_freq = base_freqs(cfg.theta, d);
    for (auto& f : r.inv_freq) {
      const double wavelen = kTwoPi / f;
      if (wavelen > long_wavelen) {
        f /= s;
      } else if (wavelen >= short_wavelen) {
        const double a = (static_cast<double>(l0) / wavelen - cfg.low_freq_factor) /
                         (cfg.high_freq_factor - cfg.low_freq_factor);
        f = (1 - a) * f / s + a * f;
      }
    }
  } else {
    throw std::invalid_argument("ref::rope_inv_freq: unknown type " + cfg.type);
  }
  return r;
}

void rope_cos_sin(const std::vector<double>& inv_freq, double scaling, int64_t positions,
                  std::vector<double>& cos, std::vector<double>& sin) {
  const auto half = static_cast<int64_t>(inv_freq.size());
  cos.assign(static_cast<size_t>(positions * half), 0.0);
  sin.assign(cos.size(), 0.0);
  for (int64_t p = 0; p < positions; ++p)
    for (int64_t j = 0; j < half; ++j) {
      cos[p * half + j] = std::cos(inv_freq[j] * static_cast<double>(p)) * scaling;
      sin[p * half + j] = std::sin(inv_freq[j] * static_cast<double>(p)) * scaling;
    }
}

namespace {

// Applies the 2x2 rotation [[c, -s], [s, c]] (transpose: [[c, s], [-s, c]]) to each pair.
std::vector<double> rotate(const std::vector<double>& x, int64_t B, int64_t T, int64_t H, int64_t D,
                           const std::vector<double>& cos, const std::vector<double>& sin,
                           const std::vector<int64_t>& positions, int64_t rotary_dim,
                           bool interleaved, bool transpose) {
  std::vector<double> y = x;  // dimensions past rotary_dim pass through
  const int64_t half = rotary_dim / 2;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t p = positions[b * T + t];
      for (int64_t h = 0; h < H; ++h) {
        const int64_t row = ((b * T + t) * H + h) * D;
        for (int64_t j = 0; j < half; ++j) {
          const int64_t i0 = row + (interleaved ? 2 * j : j);
          const int64_t i1 = row + (interleaved ? 2 * j + 1 : j + half);
          const double c = cos[p * half + j],
                       s = transpose ? -sin[p * half + j] : sin[p * half + j];
          y[i0] = c * x[i0] - s * x[i1];
          y[i1] = s * x[i0] + c * x[i1];
        }
      }
    }
  return y;
}

}  // namespace

std::vector<double> rope_apply(const std::vector<double>& x, int64_t B, int64_t T, int64_t H,
                               int64_t D, const std::vector<double>& cos,
                               const std::vector<double>& sin,
                               const std::vector<int64_t>& positions, int64_t rotary_dim,
                               bool interleaved) {
  return rotate(x, B, T, H, D, cos, sin, positions, rotary_dim, interleaved, false);
}

std::vector<double> rope_apply_backward(const std::vector<double>& dy, int64_t B, int64_t T,
                                        int64_t H, int64_t D, const std::vector<double>& cos,
                                        const std::vector<double>& sin,
                                        const std::vector<int64_t>& positions, int64_t rotary_dim,
                                        bool interleaved) {
  return rotate(dy, B, T, H, D, cos, sin, positions, rotary_dim, interleaved, true);
}

}  // namespace vkf::ref
