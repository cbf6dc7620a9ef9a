// Learning-rate schedules (see schedule.h); the formulas are those of transformers'
// optimization.py lambdas.
#include "train/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "vk/error.h"

namespace vkf::train {

LrSchedule::LrSchedule(const ScheduleConfig& c) : c_(c) {
  static const char* kTypes[] = {"constant", "constant_with_warmup", "linear", "cosine",
                                 "cosine_with_min_lr"};
  bool known = false;
  for (const char* t : kTypes) known = known || c.type == t;
  VKF_REQUIRE(known, "--lr-scheduler-type {}: supported are constant, constant_with_warmup, linear, "
              "cosine, cosine_with_min_lr", c.type);
  VKF_REQUIRE(c.learning_rate >= 0 && std::isfinite(c.learning_rate),
              "--learning-rate must be a finite number >= 0 (got {})", c.learning_rate);
  VKF_REQUIRE(c.warmup_ratio >= 0 && c.warmup_ratio <= 1,
              "--warmup-ratio must be in [0, 1] (got {})", c.warmup_ratio);
  VKF_REQUIRE(c.warmup_steps >= 0, "--warmup-steps must be >= 0 (got {})", c.warmup_steps);
  VKF_REQUIRE(c.type == "constant" || c.type == "constant_with_warmup" || c.total_steps > 0,
              "the {} schedule needs the total number of steps (--max-steps or epochs)", c.type);
  warmup_ = c.warmup_ratio > 0
                ? static_cast<int64_t>(std::ceil(static_cast<double>(c.total_steps) * c.warmup_ratio))
                : c.warmup_steps;
  if (c.type == "cosine_with_min_lr") {
    VKF_REQUIRE((c.min_lr > 0) != (c.min_lr_rate > 0),
                "cosine_with_min_lr needs exactly one of min_lr and min_lr_rate");
  }
}

double LrSchedule::factor(int64_t s) const {
  const double step = static_cast<double>(s);
  const double warm = static_cast<double>(warmup_);
  if (c_.type == "constant") return 1.0;
  if (s < warmup_) return step / std::max(1.0, warm);
  if (c_.type == "constant_with_warmup") return 1.0;
  const double rest = std::max(1.0, static_cast<double>(c_.total_steps) - warm);
  if (c_.type == "linear") return std::max(0.0, (static_cast<double>(c_.total_steps) - step) / rest);
  const double progress = (step - warm) / rest;
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * c_.num_cycles * 2.0 * progress));
  if (c_.type == "cosine") return std::max(0.0, cosine);
  const double rate = c_.min_lr > 0 ? c_.min_lr / c_.learning_rate : c_.min_lr_rate;
  return std::max(0.0, cosine * (1.0 - rate) + rate);
}

double LrSchedule::lr_at(int64_t step) const {
  VKF_REQUIRE(step >= 1, "lr_at: optimizer steps count from 1 (got {})", step);
  return c_.learning_rate * factor(step - 1);
}

}  // namespace vkf::train
