// Optimizers that update parameters in place from their .grad(): AdamW and SGD with torch's
// arithmetic (torch.optim.AdamW / torch.optim.SGD with foreach=False), so that parameters after k
// steps match PyTorch's to within a few ulp (see PARITY.md). Updates are not recorded on the tape.
//
// Exactness: the hyper-parameter scalars (bias corrections, step size, 1 - lr*wd, ...) are
// computed on the host in double, as Python computes them, and used as f32, as torch does. Per
// element, the f32 operations run in torch's order; where torch's CPU/CUDA kernels fuse a
// multiply-add (lerp_, add_(x, alpha=a), addcmul_ as compiled) so do the kernels here, rounded
// once on every device, and nowhere else. Against torch 2.11's CPU results: SGD and AdamW's
// moments agree bitwise; AdamW's parameters differ by an ulp where torch's sqrt (MKL's, not
// correctly rounded) does. sqrt and division are the device's: Vulkan allows them a few ulp
// (lavapipe rounds them correctly).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"

namespace vkf::ops {

struct AdamWConfig {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
};

// Mixed precision with dynamic loss scaling (train/optimizer_step.h): how an update sees its
// gradient and whether the device skips it. The default changes nothing.
struct StepGate {
  // A one-element f32 device tensor (GradScaler's found_inf): where it holds a nonzero value when
  // the update runs, the update leaves the parameter and its state bit for bit as they were.
  Tensor found_inf;
  // Gradients are multiplied by this before use (1 / loss scale when nothing unscaled them).
  float grad_multiplier = 1.0f;
  // Clipping folded into the update (a one-element f32 tensor: the total norm of the unscaled
  // gradients; undefined: no clipping): each gradient is used as (g * clip_unscale) * c with
  // c = min(1, max_norm / (norm + 1e-6)), each product rounded as GradScaler.unscale_ and
  // clip_grad_norm_'s in-place multiplies round them (the numbers ops::unscale_and_clip_ would
  // write), but nothing is written back to the gradients. grad_multiplier must then be 1.
  Tensor clip_norm;
  float max_norm = 0.0f;
  float clip_unscale = 1.0f;  // 1 / loss scale, or 1 (exact: plain clipping)
};

// The scalars of one AdamW step that change from step to step (with the learning rate and the
// step number t), computed in double and rounded to f32 as torch does.
struct AdamWStepScalars {
  float decay;          // 1 - lr * weight_decay
  float bc2_sqrt;       // sqrt(1 - beta2^t)
  float neg_step_size;  // -lr / (1 - beta1^t)
};
AdamWStepScalars adamw_step_scalars(const AdamWConfig& config, int64_t t);

// Where a replayed step (train/step_runner.h) takes those scalars: from device memory, entry
// `index` of `table` (contiguous f32, 3 values per entry in AdamWStepScalars order), which the
// host refreshes before each replay, instead of push constants baked into the recording. An
// undefined table: the push constants.
struct DeviceStepScalars {
  Tensor table;
  int64_t index = 0;
};

// One AdamW step of one tensor, in place: param, exp_avg and exp_avg_sq (contiguous f32, same
// shape as grad) are updated for step number t >= 1 (1 on the first step). AdamW::step updates
// all its parameters in one dispatch with the same arithmetic (shaders/adamw.comp).
void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                  const Tensor& exp_avg_sq, const AdamWConfig& config, int64_t t,
                  const StepGate& gate = {}, const DeviceStepScalars& device_scalars = {});

// AdamW over a list of parameters (contiguous f32 tensors, each listed once), with zero-initialized
// moments. step() updates each parameter that has a gradient and skips the others, as torch does,
// all in one dispatch (a multi-tensor kernel); like torch's per-parameter state["step"], a
// parameter's step number advances only when it is updated. Weight decay is config.weight_decay for
// every parameter, or per parameter with the second constructor (the HF Trainer decays no biases or
// norm weights: pass 0 for those).
class AdamW {
 public:
  AdamW(std::vector<Tensor> params, AdamWConfig config);
  AdamW(std::vector<Tensor> params, AdamWConfig config, std::vector<double> weight_decay);

  // With `device_scalars` ([3 * parameters] f32, see DeviceStepScalars; entry i for parameter i)
  // the kernels read their step scalars from it: a step captured for replay.
  void step(const StepGate& gate = {}, const Tensor& device_scalars = {});
  // Replay support: the step scalars each parameter's next step would use (its step number + 1,
  // the current learning rate), 3 per parameter, for the table of a captured step(); and the host
  // side of a step that updated `stepped`, which step() itself does and a replay of a captured
  // step() repeats with its last_stepped().
  void next_step_scalars(std::span<float> out) const;
  void count_step(const std::vector<size_t>& stepped);
  const std::vector<size_t>& last_stepped() const { return last_stepped_; }
  // For a gated step() that the device skipped (its found_inf was set): puts the step numbers
  // back as they were before it, as torch's GradScaler never calls optimizer.step() on overflow.
  void uncount_last_step();
  void zero_grad();  // drops every parameter's gradient (torch's set_to_none)
  void set_lr(double lr);  // for schedules; takes effect at the next step()
  double lr() const { return config_.lr; }
  const AdamWConfig& config() const { return config_; }
  int64_t step_count() const { return steps_; }  // step() calls so far

  // State, for checkpointing and resume (same order as the parameters).
  std::vector<Tensor>& params() { return params_; }
  std::vector<Tensor>& exp_avg() { return exp_avg_; }
  std::vector<Tensor>& exp_avg_sq() { return exp_avg_sq_; }
  std::vector<int64_t>& param_steps() { return param_steps_; }  // torch's state["step"]
  const std::vector<double>& weight_decay() const { return weight_decay_; }
  void set_step_count(int64_t steps);

 private:
  std::vector<Tensor> params_, exp_avg_, exp_avg_sq_;
  std::vector<double> weight_decay_;
  std::vector<int64_t> param_steps_;
  std::vector<size_t> last_stepped_;  // the parameters the last step() updated
  bool last_step_countable_ = false;  // a step() that uncount_last_step() may take back
  AdamWConfig config_;
  int64_t steps_ = 0;
};

struct SGDConfig {
  double lr = 1e-3, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
};

// One SGD step of one tensor, in place. momentum_buffer (contiguous f32, grad's shape) is needed
// when config.momentum != 0: on the first step (first_step = true) it is set to the gradient
// (plus weight decay), as torch initializes it; afterwards it is updated.
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                const SGDConfig& config, bool first_step);

// SGD over a list of parameters, with the same shape of API as AdamW. A momentum buffer is
// created at a parameter's first update (undefined before, as torch's None).
class SGD {
 public:
  SGD(std::vector<Tensor> params, SGDConfig config);
  SGD(std::vector<Tensor> params, SGDConfig config, std::vector<double> weight_decay);

  void step();
  void zero_grad();
  void set_lr(double lr);
  double lr() const { return config_.lr; }
  const SGDConfig& config() const { return config_; }
  int64_t step_count() const { return steps_; }

  std::vector<Tensor>& params() { return params_; }
  std::vector<Tensor>& momentum_buffer() { return momentum_buffer_; }
  const std::vector<double>& weight_decay() const { return weight_decay_; }
  void set_step_count(int64_t steps);

 private:
  std::vector<Tensor> params_, momentum_buffer_;
  std::vector<double> weight_decay_;
  SGDConfig config_;
  int64_t steps_ = 0;
};

}  // namespace vkf::ops
