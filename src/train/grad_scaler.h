// Dynamic loss scaling for f16 mixed precision, as torch.amp.GradScaler does it with its defaults:
// the loss is scaled by S (2^16 at first) so that small gradients survive f16 products; a step
// whose gradients hold an inf or NaN is skipped and halves S; after growth_interval (2000) clean
// steps in a row S doubles. This class holds the host side of it (S and the count of clean steps,
// updated once per step from the found_inf flag read back with the loss); the device side is
// ops::grad_norm_and_overflow, ops::unscale_and_clip_ and the gated AdamW (ops::StepGate), put
// together by train/optimizer_step.h.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace vkf::train {

struct GradScalerConfig {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class GradScaler {
 public:
  explicit GradScaler(const GradScalerConfig& config = {});  // validates; errors name the field

  // S, an f32 value as torch keeps it (a power of two with the default factors).
  float scale() const { return scale_; }
  // 1 / S as GradScaler.unscale_ forms it: the reciprocal in double, rounded to f32.
  float inv_scale() const;
  // Clean steps since the last change of S (torch's _growth_tracker).
  int64_t growth_tracker() const { return growth_tracker_; }
  const GradScalerConfig& config() const { return config_; }

  // torch's _amp_update_scale_: on overflow S *= backoff_factor and the tracker restarts; else
  // the tracker counts the step, and on reaching growth_interval S *= growth_factor (kept only
  // if the result is finite, as torch's kernel does) and the tracker restarts.
  void update(bool found_inf);

  // The state torch's GradScaler.state_dict() holds (scale, growth_factor, backoff_factor,
  // growth_interval, _growth_tracker), for checkpoints; from_json restores all of it, as
  // load_state_dict does. `where` names the file in errors.
  nlohmann::json to_json() const;
  static GradScaler from_json(const nlohmann::json& j, const std::string& where);

 private:
  GradScalerConfig config_;
  float scale_;
  int64_t growth_tracker_ = 0;
};

}  // namespace vkf::train
