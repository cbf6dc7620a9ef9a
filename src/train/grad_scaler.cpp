// The host side of dynamic loss scaling (see grad_scaler.h).
#include "train/grad_scaler.h"

#include <cmath>
#include <string>

#include "vk/error.h"

namespace vkf::train {

GradScaler::GradScaler(const GradScalerConfig& c) : config_(c) {
  const float s = static_cast<float>(c.init_scale);
  VKF_REQUIRE(std::isfinite(s) && s > 0.0f, "loss scaling: init_scale must be a positive f32 number, got {}",
              c.init_scale);
  VKF_REQUIRE(std::isfinite(c.growth_factor) && c.growth_factor > 1.0,
              "loss scaling: growth_factor must be > 1, got {}", c.growth_factor);
  VKF_REQUIRE(std::isfinite(c.backoff_factor) && c.backoff_factor > 0.0 && c.backoff_factor < 1.0,
              "loss scaling: backoff_factor must be in (0, 1), got {}", c.backoff_factor);
  VKF_REQUIRE(c.growth_interval > 0, "loss scaling: growth_interval must be a positive integer, got {}",
              c.growth_interval);
  scale_ = s;
}

float GradScaler::inv_scale() const { return static_cast<float>(1.0 / static_cast<double>(scale_)); }

void GradScaler::update(bool found_inf) {
  if (found_inf) {
    scale_ = static_cast<float>(static_cast<double>(scale_) * config_.backoff_factor);
    growth_tracker_ = 0;
    return;
  }
  const int64_t successful = growth_tracker_ + 1;
  if (successful == config_.growth_interval) {
    const float grown = static_cast<float>(static_cast<double>(scale_) * config_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  } else {
    growth_tracker_ = successful;
  }
}

nlohmann::json GradScaler::to_json() const {
  return {{"scale", scale_},
          {"growth_factor", config_.growth_factor},
          {"backoff_factor", config_.backoff_factor},
          {"growth_interval", config_.growth_interval},
          {"_growth_tracker", growth_tracker_}};
}

GradScaler GradScaler::from_json(const nlohmann::json& j, const std::string& where) {
  VKF_REQUIRE(j.is_object(), "{}: 'grad_scaler' must be an object", where);
  for (const char* key : {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"})
    VKF_REQUIRE(j.contains(key) && j.at(key).is_number(), "{}: grad_scaler.{} is missing or not a number", where, key);
  GradScalerConfig c;
  c.init_scale = j.at("scale").get<double>();
  c.growth_factor = j.at("growth_factor").get<double>();
  c.backoff_factor = j.at("backoff_factor").get<double>();
  c.growth_interval = j.at("growth_interval").get<int64_t>();
  GradScaler s(c);
  s.growth_tracker_ = j.at("_growth_tracker").get<int64_t>();
  VKF_REQUIRE(s.growth_tracker_ >= 0 && s.growth_tracker_ < c.growth_interval,
              "{}: grad_scaler._growth_tracker is {}, outside [0, growth_interval = {})", where,
              s.growth_tracker_, c.growth_interval);
  return s;
}

}  // namespace vkf::train
