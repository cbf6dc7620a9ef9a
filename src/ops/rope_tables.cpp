// Rotary inverse-frequency and cos/sin tables (see rope_tables.h).
//
// Each step mirrors one float32 tensor operation of transformers' rope init functions: the
// operation is done in double and rounded with f32(). For +, -, *, / on float operands that is
// exactly float arithmetic (double has more than 2 * 24 + 2 bits); pow, cos and sin are rounded
// from double, i.e. correctly rounded where torch's float versions may be one ulp off. Python
// scalars combined with a float32 tensor are rounded to float first, as torch does.
#include "ops/rope_tables.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "vk/error.h"

namespace vkf::ops {
namespace {

double f32(double v) {
  return static_cast<double>(static_cast<float>(v));
}

// torch: 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)) in float32.
std::vector<double> plain_inv_freq(double base, int64_t dim) {
  std::vector<double> inv(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double e = f32(static_cast<double>(2 * i) / static_cast<double>(dim));
    inv[i] = f32(1.0 / f32(std::pow(f32(base), e)));
  }
  return inv;
}

void require_positive(const RopeConfig& cfg, double v, const char* field) {
  VKF_REQUIRE(std::isfinite(v) && v > 0, "rope '{}': {} must be a finite number > 0, got {}",
              cfg.type, field, v);
}

// original_max_position_embeddings, defaulting to max_position_embeddings as transformers'
// standardize_rope_params does for llama3 / yarn / longrope.
int64_t original_max(const RopeConfig& cfg) {
  const int64_t v = cfg.original_max_position_embeddings > 0 ? cfg.original_max_position_embeddings
                                                             : cfg.max_position_embeddings;
  VKF_REQUIRE(v > 0,
              "rope '{}': needs original_max_position_embeddings or max_position_embeddings > 0 "
              "(got {} and {})",
              cfg.type, cfg.original_max_position_embeddings, cfg.max_position_embeddings);
  return v;
}

// `factor`, or for yarn / longrope when it is 0 (absent) the ratio of the context lengths.
double scaling_factor(const RopeConfig& cfg, int64_t original) {
  double factor = cfg.factor;
  if (factor == 0 && (cfg.type == "yarn" || cfg.type == "longrope")) {
    VKF_REQUIRE(cfg.max_position_embeddings > 0,
                "rope '{}': factor is absent (0), so max_position_embeddings must be > 0 to "
                "derive it",
                cfg.type);
    factor = static_cast<double>(cfg.max_position_embeddings) / static_cast<double>(original);
  }
  require_positive(cfg, factor, "factor");
  return factor;
}

std::vector<double> dynamic_inv_freq(const RopeConfig& cfg, int64_t dim, int64_t seq_len) {
  require_positive(cfg, cfg.factor, "factor");
  VKF_REQUIRE(cfg.max_position_embeddings > 0,
              "rope 'dynamic': max_position_embeddings must be > 0, got {}",
              cfg.max_position_embeddings);
  VKF_REQUIRE(dim > 2,
              "rope 'dynamic': rotary_dim must be > 2 (the base exponent is d/(d-2)), got {}", dim);
  const double factor = cfg.factor;
  const double max_pos = static_cast<double>(cfg.max_position_embeddings);
  const double exponent = static_cast<double>(dim) / static_cast<double>(dim - 2);
  if (seq_len <= cfg.max_position_embeddings) {
    // Init time (Python numbers, double): base * (factor * L / L - (factor - 1)) ** (d / (d - 2)).
    const double base = cfg.theta * std::pow(factor * max_pos / max_pos - (factor - 1), exponent);
    return plain_inv_freq(base, dim);
  }
  // Forward-time growth: seq_len = max(position_ids) + 1 is an int64 tensor, so the new base is
  // computed with float32 tensors.
  const double len = f32(static_cast<double>(seq_len));
  const double scaled = f32(f32(factor) * len);
  const double ratio = f32(scaled / f32(max_pos));
  const double shifted = f32(ratio - f32(factor - 1));
  const double grown = f32(std::pow(shifted, f32(exponent)));
  return plain_inv_freq(f32(f32(cfg.theta) * grown), dim);
}

RopeTables yarn(const RopeConfig& cfg, int64_t dim) {
  const int64_t original = original_max(cfg);
  const double factor = scaling_factor(cfg, original);
  VKF_REQUIRE(cfg.theta > 1, "rope 'yarn': theta must be > 1 (its log divides), got {}", cfg.theta);
  RopeTables t;
  auto mscale = [](double scale, double m) {
    return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
  };
  if (cfg.attention_factor) {
    t.attention_scaling = *cfg.attention_factor;
  } else if (cfg.mscale.value_or(0) != 0 && cfg.mscale_all_dim.value_or(0) != 0) {
    t.attention_scaling = mscale(factor, *cfg.mscale) / mscale(factor, *cfg.mscale_all_dim);
  } else {
    t.attention_scaling = mscale(factor, 1.0);
  }
  const double beta_fast = cfg.beta_fast != 0 ? cfg.beta_fast : 32;
  const double beta_slow = cfg.beta_slow != 0 ? cfg.beta_slow : 1;
  // The dimension at which a frequency completes `rotations` turns over the original context.
  auto correction_dim = [&](double rotations) {
    return (static_cast<double>(dim) *
            std::log(static_cast<double>(original) / (rotations * 2 * std::numbers::pi))) /
           (2 * std::log(cfg.theta));
  };
  double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
  if (cfg.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
  const double low32 = f32(low), width32 = f32(high - low);
  const double factor32 = f32(factor);
  t.inv_freq.resize(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double ramp = std::clamp(f32(f32(static_cast<double>(i) - low32) / width32), 0.0, 1.0);
    const double extrapolation_weight = f32(1 - ramp);
    const double e = f32(static_cast<double>(2 * i) / static_cast<double>(dim));
    const double pos_freq = f32(std::pow(f32(cfg.theta), e));
    const double extrapolated = f32(1.0 / pos_freq);
    const double interpolated = f32(1.0 / f32(factor32 * pos_freq));
    t.inv_freq[i] = f32(f32(interpolated * f32(1 - extrapolation_weight)) +
                        f32(extrapolated * extrapolation_weight));
  }
  return t;
}

RopeTables longrope(const RopeConfig& cfg, int64_t dim, int64_t seq_len) {
  const int64_t original = original_max(cfg);
  const double factor = scaling_factor(cfg, original);
  const size_t half = static_cast<size_t>(dim / 2);
  VKF_REQUIRE(cfg.short_factor.size() == half && cfg.long_factor.size() == half,
              "rope 'longrope': short_factor and long_factor need rotary_dim / 2 = {} values each, "
              "got {} and {}",
              half, cfg.short_factor.size(), cfg.long_factor.size());
  RopeTables t;
  if (cfg.attention_factor) {
    t.attention_scaling = *cfg.attention_factor;
  } else {
    t.attention_scaling =
        factor <= 1 ? 1.0
                    : std::sqrt(1 + std::log(factor) / std::log(static_cast<double>(original)));
  }
  const auto& ext = seq_len > original ? cfg.long_factor : cfg.short_factor;
  t.inv_freq.resize(half);
  for (size_t i = 0; i < half; ++i) {
    VKF_REQUIRE(std::isfinite(ext[i]) && ext[i] > 0,
                "rope 'longrope': {}[{}] must be a finite number > 0, got {}",
                seq_len > original ? "long_factor" : "short_factor", i, ext[i]);
    const double e = f32(static_cast<double>(2 * i) / static_cast<double>(dim));
    t.inv_freq[i] = f32(1.0 / f32(f32(ext[i]) * f32(std::pow(f32(cfg.theta), e))));
  }
  return t;
}

RopeTables llama3(const RopeConfig& cfg, int64_t dim) {
  require_positive(cfg, cfg.factor, "factor");
  require_positive(cfg, cfg.low_freq_factor, "low_freq_factor");
  require_positive(cfg, cfg.high_freq_factor, "high_freq_factor");
  VKF_REQUIRE(cfg.high_freq_factor != cfg.low_freq_factor,
              "rope 'llama3': high_freq_factor and low_freq_factor must differ, both are {}",
              cfg.low_freq_factor);
  const double original = static_cast<double>(original_max(cfg));
  const double low_wavelen = f32(original / cfg.low_freq_factor);
  const double high_wavelen = f32(original / cfg.high_freq_factor);
  const double factor32 = f32(cfg.factor);
  RopeTables t;
  t.inv_freq = plain_inv_freq(cfg.theta, dim);
  for (double& inv : t.inv_freq) {
    // `scalar / tensor` is reciprocal(tensor) * scalar in torch (Tensor.__rtruediv__).
    const double wavelen = f32(f32(1.0 / inv) * f32(2 * std::numbers::pi));
    // Long wavelengths are divided by factor, short ones kept, the middle band blended.
    const double scaled = wavelen > low_wavelen ? f32(inv / factor32) : inv;
    const double smooth =
        f32(f32(f32(f32(1.0 / wavelen) * f32(original)) - f32(cfg.low_freq_factor)) /
            f32(cfg.high_freq_factor - cfg.low_freq_factor));
    const double blended =
        f32(f32(f32(f32(1 - smooth) * scaled) / factor32) + f32(smooth * scaled));
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    inv = medium ? blended : scaled;
  }
  return t;
}

}  // namespace

int64_t rope_rotary_dim(const RopeConfig& cfg) {
  VKF_REQUIRE(cfg.head_dim > 0, "rope: head_dim must be > 0, got {}", cfg.head_dim);
  VKF_REQUIRE(cfg.partial_rotary_factor > 0 && cfg.partial_rotary_factor <= 1,
              "rope: partial_rotary_factor must be in (0, 1], got {}", cfg.partial_rotary_factor);
  const auto dim =
      static_cast<int64_t>(static_cast<double>(cfg.head_dim) * cfg.partial_rotary_factor);
  VKF_REQUIRE(
      dim > 0 && dim % 2 == 0,
      "rope: rotary_dim = int(head_dim {} * partial_rotary_factor {}) = {} must be even and "
      "> 0",
      cfg.head_dim, cfg.partial_rotary_factor, dim);
  return dim;
}

RopeTables rope_inv_freq(const RopeConfig& cfg, int64_t seq_len) {
  const int64_t dim = rope_rotary_dim(cfg);
  require_positive(cfg, cfg.theta, "theta");
  VKF_REQUIRE(seq_len >= 0, "rope: seq_len must be >= 0 (0 = not given), got {}", seq_len);
  RopeTables t;
  if (cfg.type == "default") {
    t.inv_freq = plain_inv_freq(cfg.theta, dim);
  } else if (cfg.type == "linear") {
    require_positive(cfg, cfg.factor, "factor");
    t.inv_freq = plain_inv_freq(cfg.theta, dim);
    for (double& v : t.inv_freq) v = f32(v / f32(cfg.factor));
  } else if (cfg.type == "dynamic") {
    t.inv_freq = dynamic_inv_freq(cfg, dim, seq_len);
  } else if (cfg.type == "yarn") {
    t = yarn(cfg, dim);
  } else if (cfg.type == "longrope") {
    t = longrope(cfg, dim, seq_len);
  } else if (cfg.type == "llama3") {
    t = llama3(cfg, dim);
  } else {
    fail(
        "rope: unsupported rope type '{}' (supported: default, linear, dynamic, yarn, longrope, "
        "llama3)",
        cfg.type);
  }
  t.rotary_dim = dim;
  return t;
}

RopeCosSinHost rope_cos_sin_host(const RopeTables& tables, int64_t positions) {
  const auto half = static_cast<int64_t>(tables.inv_freq.size());
  VKF_REQUIRE(
      half > 0 && tables.rotary_dim == 2 * half,
      "rope_cos_sin: tables hold {} frequencies for rotary_dim {} (expected rotary_dim / 2)", half,
      tables.rotary_dim);
  VKF_REQUIRE(positions > 0 && positions <= (int64_t{1} << 31) / half,
              "rope_cos_sin: positions must be in [1, 2^31 / {}], got {}", half, positions);
  RopeCosSinHost out;
  out.positions = positions;
  out.half = half;
  out.cos.resize(static_cast<size_t>(positions * half));
  out.sin.resize(out.cos.size());
  // The angle is not rounded to float32 as transformers' fp32 forward rounds it: that rounding
  // moves the angle by up to |angle| * 2^-24 (2e-4 rad at position 4096), the largest error of
  // its fp32 rotary embedding and one that its fp64 run does not make. Here the angle is the
  // double product of the float32 frequency and the position, and each entry is rounded once.
  for (int64_t p = 0; p < positions; ++p) {
    for (int64_t j = 0; j < half; ++j) {
      const double angle = f32(tables.inv_freq[j]) * static_cast<double>(p);
      out.cos[p * half + j] = static_cast<float>(std::cos(angle) * tables.attention_scaling);
      out.sin[p * half + j] = static_cast<float>(std::sin(angle) * tables.attention_scaling);
    }
  }
  return out;
}

RopeCosSin rope_cos_sin(const RopeTables& tables, int64_t positions) {
  const RopeCosSinHost h = rope_cos_sin_host(tables, positions);
  // One allocation, the sin table right after the cos table: the chained one-query attention
  // derives the one's address from the other's (ops/decode_attention.cpp).
  std::vector<float> both(h.cos.begin(), h.cos.end());
  both.insert(both.end(), h.sin.begin(), h.sin.end());
  const Tensor t = Tensor::from_host(std::span<const float>(both), {2, h.positions, h.half});
  return {t.slice(0, 0, 1).reshape({h.positions, h.half}),
          t.slice(0, 1, 2).reshape({h.positions, h.half})};
}

}  // namespace vkf::ops
