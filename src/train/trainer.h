// Full fine-tuning (or training from a config) of a decoder model: shuffled batches of packed or
// padded sequences, gradient accumulation with the loss averaged over every counted token of the
// accumulated micro-batches (as transformers' Trainer does), AdamW without weight decay on biases
// and norm weights, a learning-rate schedule, gradient clipping, periodic evaluation, and the
// final model written as a Hugging Face folder with the tokenizer files.
// With a LoRA adapter (TrainOptions::adapter) only the adapter's tensors are trained: they alone
// get gradients, AdamW state, clipping and checkpoints; the base weights stay bit for bit as
// loaded (no gradient is computed for them, and no optimizer holds them).
// The model's dropout (config.json probabilities) is on in training forwards only, drawn from a
// stream seeded by --seed whose position is checkpointed, so runs are reproducible and resumes
// bitwise exact.
// Mixed precision (TrainOptions::precision = F16): matrix products with f16 operands and fp32
// accumulation, f32 master weights, gradients and AdamW state, and dynamic loss scaling with
// transformers' Trainer semantics (see optimizer_step.h); the scaler's state is checkpointed.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/dropout_rng.h"
#include "core/launch.h"
#include "models/decoder.h"
#include "peft/lora.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/grad_scaler.h"
#include "train/memory_plan.h"
#include "train/schedule.h"

namespace vkf::train {

// Per-step figures for a progress display.
struct Progress {
  int64_t step, total;
  double loss, lr, grad_norm, tokens_per_s, eta_s;
};

struct TrainOptions {
  int64_t max_steps = -1;           // optimizer steps; -1: from num_train_epochs
  double num_train_epochs = 1.0;
  int64_t batch_size = 8;           // per micro-batch
  int64_t grad_accum = 1;
  ScheduleConfig schedule;          // learning_rate, type, warmup
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  double max_grad_norm = 1.0;       // <= 0 disables clipping
  int64_t logging_steps = 10;
  int64_t eval_steps = 0;           // 0: evaluate at the end only
  uint64_t seed = 42;                // data order, initialization and dropout masks
  bool gradient_checkpointing = false;  // recompute each layer's activations in the backward pass
  std::string output_dir;        // checkpoints go to <output_dir>/checkpoint-<step>
  int64_t save_steps = 0;        // checkpoint every N steps and at the end (0: none)
  int64_t save_total_limit = 0;  // keep only the newest K checkpoints (0: all)
  std::string resume_from;       // a checkpoint folder, "auto" (newest in output_dir) or ""
  // LoRA training: this adapter, added to the model and active, is what is trained (null: the
  // model's own parameters, full fine-tuning).
  std::shared_ptr<peft::LoraAdapter> adapter;
  // The loss fused with the LM head (ops::linear_cross_entropy: no [tokens, vocab] logits); false
  // makes the whole logits and takes cross_entropy_parts of them, the composed form, for
  // comparisons. LoRA on the head always takes the composed form.
  bool fused_loss = true;
  // Device memory the run may plan on, in bytes (0: what the device has); a run whose memory plan
  // needs more stops before the first step (see memory_plan.h).
  uint64_t max_memory = 0;
  // Matrix-product precision for the run (set for its duration, then restored). F16 trains with
  // dynamic loss scaling configured by loss_scaling (torch.amp.GradScaler's defaults).
  MatmulPrecision precision = MatmulPrecision::F32;
  GradScalerConfig loss_scaling;
  // Replay each step from one recording once its shapes repeat (train/step_runner.h): the same
  // arithmetic with no recording, allocation or upload per step. false: every step eager.
  bool replay_steps = true;
  // Tests only: global steps whose gradients get an inf injected after the backward pass.
  std::set<int64_t> inject_overflow_at;
  // Set (e.g. by a SIGINT handler) to stop after the current step with a checkpoint written.
  const std::atomic<bool>* stop = nullptr;
  std::function<void(const Progress&)> on_progress;
};

struct TrainResult {
  std::vector<StepLog> log;     // every step, skipped ones (mixed precision) included
  std::vector<std::pair<int64_t, double>> eval;  // (step, eval loss)
  double final_eval_loss = -1;  // -1 when there is no eval set
  bool interrupted = false;     // stopped early through `stop`
};

// metrics.jsonl lines and a loss-curve SVG (train and eval loss against step) in `dir`.
void write_loss_plot(const std::string& path, const TrainResult& result);

using LogCallback = std::function<void(const std::string& line)>;

// The memory plan of train(): micro-batches of batch_size sequences as long as the longest of
// the set, every parameter trained with AdamW.
MemoryPlan plan_training_memory(const models::ArchSpec& spec, const std::vector<Example>& train_set,
                                const TrainOptions& options);

// Logs the memory plan's summary first, and fails (vkf::Error) before the first step when the
// plan exceeds the device's usable memory or options.max_memory.
TrainResult train(models::DecoderModel& model, const std::vector<Example>& train_set,
                  const std::vector<Example>& eval_set, const TrainOptions& options,
                  const LogCallback& log = {});

// One micro-batch of a training step as train() runs it: forward and the causal-LM loss (fused
// with the head unless fused_loss is false), then the backward of loss_sum / step_count, which
// accumulates into the gradient of every tensor that requires one. ids and mask are [B, T],
// labels [B*T] (HF convention, not shifted); step_count is the number of counted tokens of the
// whole step. Dropout draws from `dropout` (null: none). `seed` is the gradient backward starts
// from ([] on the device; undefined: 1), the loss scale in mixed precision. Returns loss_sum, []
// on the device.
Tensor backward_micro_batch(models::DecoderModel& model, const Tensor& ids, const Tensor& mask,
                            const std::vector<int64_t>& labels, int64_t step_count, bool fused_loss,
                            dropout_rng::Stream* dropout, const Tensor& seed = {});

// Token-weighted mean causal-LM loss over a set (no gradients).
double evaluate(models::DecoderModel& model, const std::vector<Example>& set, int64_t batch_size);

// transformers' Trainer: no weight decay for biases and normalization weights. Applied to HF
// parameter names and to peft's adapter tensor names alike: LoRA A/B matrices decay, a
// modules_to_save copy of a norm does not.
bool decays(const std::string& parameter_name);

}  // namespace vkf::train
