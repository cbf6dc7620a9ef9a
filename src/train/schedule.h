// Learning-rate schedules as transformers' get_scheduler builds them (a LambdaLR over optimizer
// steps): constant, constant_with_warmup, linear, cosine and cosine_with_min_lr, with warmup given
// in steps or as a ratio of the total (rounded up, as TrainingArguments.get_warmup_steps does).
#pragma once

#include <cstdint>
#include <string>

namespace vkf::train {

struct ScheduleConfig {
  std::string type = "linear";  // constant | constant_with_warmup | linear | cosine | cosine_with_min_lr
  double learning_rate = 5e-5;
  int64_t total_steps = 0;      // optimizer steps of the whole run
  int64_t warmup_steps = 0;     // used when warmup_ratio is 0
  double warmup_ratio = 0.0;    // fraction of total_steps, rounded up
  double num_cycles = 0.5;      // cosine: half a cosine by default
  double min_lr = 0.0;          // cosine_with_min_lr (or min_lr_rate * learning_rate)
  double min_lr_rate = 0.0;
};

class LrSchedule {
 public:
  explicit LrSchedule(const ScheduleConfig& config);  // validates; errors name the option
  // The learning rate of optimizer step `step` (1-based): base * lambda(step - 1), as LambdaLR
  // gives after step - 1 scheduler steps.
  double lr_at(int64_t step) const;
  int64_t warmup_steps() const { return warmup_; }

 private:
  double factor(int64_t scheduler_step) const;
  ScheduleConfig c_;
  int64_t warmup_ = 0;
};

}  // namespace vkf::train
