// The precision-dependent part of a training step (see optimizer_step.h).
#include "train/optimizer_step.h"

#include <limits>

#include "core/autograd.h"
#include "ops/reduce.h"
#include "vk/error.h"

namespace vkf::train {

MatmulPrecision parse_precision(const std::string& value, const std::string& option) {
  if (value == "fp32") return MatmulPrecision::F32;
  if (value == "f16") return MatmulPrecision::F16;
  fail("{} '{}': use fp32 (full precision, the default) or f16 (f16 matrix products with fp32 "
       "accumulation and dynamic loss scaling)", option, value);
}

const char* precision_name(MatmulPrecision p) { return p == MatmulPrecision::F16 ? "f16" : "fp32"; }

OptimizerStep::OptimizerStep(ops::AdamW& opt, const LrSchedule& schedule, double max_grad_norm,
                             std::optional<GradScalerConfig> loss_scaling)
    : opt_(opt), schedule_(schedule), max_grad_norm_(max_grad_norm) {
  if (loss_scaling) scaler_.emplace(*loss_scaling);
}

Tensor OptimizerStep::backward_seed() const {
  if (!scaler_) return {};
  return Tensor::full({}, scaler_->scale());
}

double OptimizerStep::lr_for(int64_t step) const { return schedule_.lr_at(step - skipped_steps_); }

void OptimizerStep::step_scalars(int64_t step, std::span<float> out) {
  lr_ = lr_for(step);
  opt_.set_lr(lr_);
  opt_.next_step_scalars(out);
}

void OptimizerStep::replayed(int64_t step, const Tensor& figures) {
  VKF_REQUIRE(figures.defined() && figures.numel() == 3,
              "training step {}: a replayed step needs the captured step's figures", step);
  lr_ = lr_for(step);
  opt_.set_lr(lr_);
  opt_.count_step(captured_stepped_);
  figures_ = figures;
  scale_used_ = scaler_ ? scaler_->scale() : 0.0f;
}

void OptimizerStep::record(int64_t step, const Tensor& loss_sum, const Tensor& step_scalars) {
  VKF_REQUIRE(loss_sum.defined() && loss_sum.numel() == 1, "training step {}: no loss to record", step);
  autograd::NoGradScope no_grad;
  std::vector<Tensor> grads;  // clipping and the check cover exactly the trained tensors
  for (const Tensor& p : opt_.params())
    if (p.grad().defined()) grads.push_back(p.grad());
  VKF_REQUIRE(!grads.empty(), "training step {}: no trained tensor received a gradient", step);
  if (inject_at_.count(step)) grads.front().reshape({-1}).slice(0, 0, 1).fill_(std::numeric_limits<float>::infinity());
  lr_ = lr_for(step);
  opt_.set_lr(lr_);
  figures_ = Tensor::empty({3}, DType::F32);
  figures_.slice(0, 0, 1).copy_(loss_sum.reshape({1}));
  const bool clip = max_grad_norm_ > 0;
  // Clipping (and unscaling) are folded into the update: AdamW reads the norm and scales each
  // gradient as clip_grad_norm_ (after GradScaler.unscale_) would, without writing it back.
  if (!scaler_) {
    ops::StepGate gate;
    if (clip) {
      const Tensor norm = ops::global_l2_norm(grads);
      figures_.slice(0, 1, 2).copy_(norm.reshape({1}));
      gate.clip_norm = norm;
      gate.max_norm = static_cast<float>(max_grad_norm_);
    } else {
      figures_.slice(0, 1, 2).fill_(0.0f);
    }
    figures_.slice(0, 2, 3).fill_(0.0f);
    opt_.step(gate, step_scalars);
    scale_used_ = 0;
  } else {
    const float inv = scaler_->inv_scale();
    const Tensor check = ops::grad_norm_and_overflow(grads, inv);  // [norm, found_inf]
    const Tensor norm = check.slice(0, 0, 1), found_inf = check.slice(0, 1, 2);
    ops::StepGate gate{found_inf, 1.0f};
    if (clip) {
      gate.clip_norm = norm;
      gate.max_norm = static_cast<float>(max_grad_norm_);
      gate.clip_unscale = inv;
    } else {
      gate.grad_multiplier = inv;
    }
    opt_.step(gate, step_scalars);
    figures_.slice(0, 1, 3).copy_(check);
    scale_used_ = scaler_->scale();
  }
  if (step_scalars.defined()) captured_stepped_ = opt_.last_stepped();
  opt_.zero_grad();
}

StepOutcome OptimizerStep::finish() {
  VKF_REQUIRE(figures_.defined(), "OptimizerStep::finish() without a recorded step");
  const std::vector<float> f = figures_.to_float();
  figures_ = {};
  StepOutcome out;
  out.loss_sum = f[0];
  out.grad_norm = f[1];
  out.lr = lr_;
  out.loss_scale = scale_used_;
  out.skipped = scaler_ && f[2] != 0.0f;
  if (scaler_) {
    if (out.skipped) {
      opt_.uncount_last_step();
      ++skipped_steps_;
    }
    scaler_->update(out.skipped);
  }
  return out;
}

void OptimizerStep::restore(int64_t skipped_steps, const std::optional<GradScaler>& scaler) {
  VKF_REQUIRE(skipped_steps >= 0, "skipped step count must be >= 0, got {}", skipped_steps);
  VKF_REQUIRE(scaler.has_value() == scaler_.has_value(), "internal: restoring {} loss-scaler state into a {} run",
              scaler ? "a" : "no", scaler_ ? "mixed-precision" : "fp32");
  skipped_steps_ = skipped_steps;
  scaler_ = scaler;
}

}  // namespace vkf::train
