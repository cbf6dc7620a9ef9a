// The part of a training step that mixed precision changes, shared by train() and
// bench/train_bench: what seeds the backward pass, and everything between the backward pass and
// the next step (gradient clipping, the loss scaler's check and unscaling, AdamW, and reading the
// step's figures back).
//
// fp32: the backward pass is seeded with 1; clip_grad_norm_ (when max_grad_norm > 0), AdamW.
// f16 (mixed precision, `--precision f16`): dynamic loss scaling as transformers' Trainer does it
// with fp16 (torch.amp.GradScaler through accelerate):
//   - the backward pass is seeded with the scale S instead of 1 (the gradients of S * loss);
//   - one pass over the gradients gives the norm of the unscaled gradients and found_inf
//     (ops::grad_norm_and_overflow); unscaling comes before clipping, as accelerate's
//     clip_grad_norm_ unscales first, or, with clipping off, it is AdamW's gradient multiplier;
//   - AdamW is gated by found_inf on the device: on overflow no parameter or moment changes.
// Either way the norm takes one dispatch over every gradient and AdamW one more: clipping (and
// unscaling) happen inside AdamW's kernel (ops::StepGate::clip_norm), which uses each gradient
// exactly as clip_grad_norm_'s in-place scaling would have left it, without writing it back.
// The host does not wait mid-step: record() packs [loss sum, grad norm, found_inf] into one small
// device tensor, and finish() reads it with the step's single download (the loss read that
// bounds how far the host runs ahead). On a skipped step it then does what the Trainer does:
// AdamW's step numbers stay where they were (optimizer.step() never ran), the learning-rate
// schedule does not advance (lr_for() of later steps lags by the skipped count, as Trainer steps
// its scheduler only when optimizer_step_was_skipped is false), the global step does advance, and
// S is halved; after growth_interval clean steps S doubles.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/launch.h"
#include "core/tensor.h"
#include "ops/optim.h"
#include "train/grad_scaler.h"
#include "train/schedule.h"

namespace vkf::train {

// "fp32" or "f16" (the value of `option`, named in the error) -> the precision; and back.
MatmulPrecision parse_precision(const std::string& value, const std::string& option);
const char* precision_name(MatmulPrecision precision);

struct StepOutcome {
  double loss_sum = 0;    // the step's summed loss (the caller divides by its token count)
  double grad_norm = 0;   // of the unscaled gradients before clipping; 0 in fp32 without clipping
  double lr = 0;          // the learning rate the step used (or would have)
  float loss_scale = 0;   // S the step ran with; 0 in fp32
  bool skipped = false;   // inf/nan gradients: no update
};

class OptimizerStep {
 public:
  // `loss_scaling` given: mixed precision with that scaler configuration; absent: fp32.
  // `opt` and `schedule` must outlive this object.
  OptimizerStep(ops::AdamW& opt, const LrSchedule& schedule, double max_grad_norm,
                std::optional<GradScalerConfig> loss_scaling);

  bool mixed() const { return scaler_.has_value(); }
  // The seed of this step's backward passes: undefined in fp32 (ones), S as a scalar tensor in
  // mixed precision.
  Tensor backward_seed() const;
  // The learning rate of global step `step` (1-based): the schedule's, counted in steps that
  // updated the model.
  double lr_for(int64_t step) const;

  // S in mixed precision, 1 in fp32: what backward_seed() holds, as a host value.
  float seed_scale() const { return scaler_ ? scaler_->scale() : 1.0f; }

  // Records the update of global step `step` after its backward passes (the gradients are
  // those of the optimizer's parameters), then drops the gradients. loss_sum: a device scalar
  // read back with the rest. With `step_scalars` (a step captured for replay, StepRunner) AdamW
  // reads its per-step scalars from that device table (ops::AdamW::step), filled by
  // step_scalars() before every run of the recording.
  void record(int64_t step, const Tensor& loss_sum, const Tensor& step_scalars = {});

  // Replay support (train/step_runner.h). What a recorded step bakes into its commands besides
  // the table is fixed while the loss scale S is (the unscaling factor 1/S); the rest is here.
  // step_scalars(): the learning rate of global step `step` and AdamW's scalars for it, 3 per
  // parameter (ops::AdamW::next_step_scalars), into `out`.
  void step_scalars(int64_t step, std::span<float> out);
  size_t step_scalar_count() const { return 3 * opt_.params().size(); }
  // The host side of record() for a replay of the step captured last as global step `step`
  // (after step_scalars(step, ...)): AdamW's step numbers advance for the parameters the capture
  // updated, and finish() reads `figures` (the capture's figures()).
  void replayed(int64_t step, const Tensor& figures);
  const Tensor& figures() const { return figures_; }  // of the recorded step, until finish()
  bool injects_overflow_at(int64_t step) const { return inject_at_.count(step) > 0; }
  // Reads the recorded step's figures (waits for the GPU) and settles the host side.
  StepOutcome finish();

  // State for checkpoints.
  int64_t skipped_steps() const { return skipped_steps_; }
  const GradScaler* scaler() const { return scaler_ ? &*scaler_ : nullptr; }
  void restore(int64_t skipped_steps, const std::optional<GradScaler>& scaler);

  // Fault injection for tests: at these global steps, one element of the first gradient is set to
  // +inf after the backward pass, as an f16 overflow would leave it.
  void inject_overflow_at(std::set<int64_t> steps) { inject_at_ = std::move(steps); }

 private:
  ops::AdamW& opt_;
  const LrSchedule& schedule_;
  double max_grad_norm_;
  std::optional<GradScaler> scaler_;
  int64_t skipped_steps_ = 0;
  std::set<int64_t> inject_at_;
  Tensor figures_;  // [3]: loss sum, grad norm, found_inf (of the recorded step)
  std::vector<size_t> captured_stepped_;  // parameters the last record() with a table updated
  double lr_ = 0;
  float scale_used_ = 0;
};

}  // namespace vkf::train
