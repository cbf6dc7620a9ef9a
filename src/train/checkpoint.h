// Training checkpoints: model parameters and AdamW state (safetensors) plus the trainer state
// (JSON: step, data order and cursor, RNG and dropout-stream state, loss history, precision and the
// loss scaler's state of a mixed-precision run), written into a temporary folder and renamed into
// place, so a process killed at any moment leaves the previous checkpoint intact.
// Only the newest `keep` checkpoints are kept. Resuming restores everything, so N steps + resume +
// N steps equals 2N steps bit for bit. A LoRA run's checkpoint holds the adapter in peft's files
// (adapter_config.json + adapter_model.safetensors) instead of the model, and its optimizer state
// is keyed by the adapter tensor names; the base weights never change, so they are not copied.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/decoder.h"
#include "ops/optim.h"
#include "peft/lora.h"
#include "train/grad_scaler.h"

namespace vkf::train {

struct StepLog {
  int64_t step;
  double loss, lr, grad_norm;
  double loss_scale = 0;  // mixed precision: the scale the step ran with (0: fp32)
  bool skipped = false;   // mixed precision: inf/nan gradients, no update
};

struct TrainerState {
  int64_t step = 0;
  std::vector<uint64_t> order;  // data order of the current epoch
  uint64_t cursor = 0;          // next position in `order`
  std::string rng;              // std::mt19937_64 state, as its stream form
  // The training dropout stream (core/dropout_rng.h); absent in checkpoints written before it
  // existed (those runs had no dropout).
  bool has_dropout_stream = false;
  uint64_t dropout_seed = 0;
  uint64_t dropout_offset = 0;
  std::vector<StepLog> log;
  // The run's precision ("fp32" or "f16"; checkpoints written before precision existed: "fp32"),
  // and in f16 the loss scaler's state and how many steps it skipped (the learning-rate schedule
  // counts only the others).
  std::string precision = "fp32";
  std::optional<GradScaler> grad_scaler;
  int64_t skipped_steps = 0;
};

// Writes <root>/checkpoint-<step>; removes older checkpoints beyond `keep` (0 keeps all). With an
// adapter, the optimizer's parameters are the adapter's parameters() in order; without, the
// model's parameter_names().
std::string save_checkpoint(const std::string& root, const models::DecoderModel& model,
                            ops::AdamW& opt, const TrainerState& state, int64_t keep,
                            const peft::LoraAdapter* adapter = nullptr);
// Loads a checkpoint folder into `model` (or into `adapter`'s tensors, in place) and `opt`. The
// checkpoint must be of the same kind (full or LoRA) with the same parameter names and shapes; a
// LoRA checkpoint must also have the same adapter config.
TrainerState load_checkpoint(const std::string& dir, models::DecoderModel& model, ops::AdamW& opt,
                             peft::LoraAdapter* adapter = nullptr);
// Whether `dir` holds a LoRA checkpoint (or adapter): an adapter_config.json.
bool is_adapter_folder(const std::string& dir);
// The newest complete checkpoint under `root`, or "" when there is none.
std::string latest_checkpoint(const std::string& root);

}  // namespace vkf::train
