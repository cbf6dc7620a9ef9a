// Memory planning: how many bytes of device memory a training (or forward-only) run of a
// decoder will need at its peak, worked out from the architecture and the batch shape before
// anything is allocated, so a run that cannot fit says so up front, with the estimate and what to
// change.
//
// The estimate mirrors what the code keeps alive, not a textbook formula: the autodiff tape holds
// every input and output of every recorded op until backward ends (so every forward intermediate
// counts as an activation, plus what backward lambdas save: norm rstd, attention's log-sum-exp,
// cross-entropy's lse, or the fused head loss's input gradients; the fused attention saves no
// [B, H, T, T] probabilities), parameter
// gradients appear one by one during backward, AdamW's two moments exist from the optimizer's
// construction, and every allocation is rounded up to the allocator's 256 bytes. A training step
// peaks at one of a few moments (the end of the forward with the fused head loss, or the logits
// gradient without it; the first layer's MLP or attention gradients; the embedding gradient);
// the plan takes the worst.
// tests/unit/test_memory_plan.cpp checks it against the measured peak of live tensor bytes of
// real training steps.
//
// Mixed precision (--precision f16) keeps every tensor f32 (master weights, gradients, AdamW
// state, activations); the loss scale travels in push constants and one scalar seed, and the loss
// scaler's inf/nan check adds one float per 4096 gradient elements beside clipping's partial
// sums, after backward has released the activations. What differs is the products' temporaries:
// each moment counts those of its most demanding product under the run's precision and device
// (ops::detail::gemm_temporaries: split-K partial sums, the tensor-core kernel's f16 operand
// copies, the fp32 kernel's transposed copies on NVIDIA), and the fused head loss its f16
// gradient group where products read f16 copies. tests/unit/test_memory_plan.cpp measures fp32
// and f16 runs, the latter also through the cooperative-matrix emulation on devices without
// tensor cores (it passes on lavapipe and on the H200).
//
// What the plan does not cover: memory a tensor releases is returned to the allocator only once
// the GPU has finished the commands queued before (vk::Stream::release), so while the GPU lags
// behind the host, device memory in use exceeds live tensor bytes (see DeviceMemoryStats).
#pragma once

#include <cstdint>
#include <string>

#include "models/arch_spec.h"

namespace vkf::train {

enum class PlanOptimizer { AdamW, SGD, SGDMomentum };

struct MemoryPlanInput {
  int64_t batch_size = 1;  // sequences per micro-batch
  int64_t seq_len = 1;     // tokens per sequence (the longest of the run)
  bool training = true;    // false: a forward pass without gradients (evaluation, prefill)
  PlanOptimizer optimizer = PlanOptimizer::AdamW;
  int64_t gradient_accumulation_steps = 1;  // > 1 keeps every gradient alive across micro-batches
  // Trainable parameters (elements); -1: all of them (full fine-tuning). LoRA trains only a few:
  // gradients and optimizer state are for these alone.
  int64_t trainable_parameters = -1;
  // Activations saved for backward are each layer's input plus one layer recomputed at a time,
  // as gradient checkpointing (TrainOptions::gradient_checkpointing, being added) is to work;
  // not yet measured against it.
  bool gradient_checkpointing = false;
  // A PEFT adapter's own tensors (LoRA A/B pairs, modules_to_save copies: elements, f32) and what
  // its forward adds to the tape per token (LoRA on a linear layer of width out at rank r keeps
  // x·Aᵀ [r], B·(x·Aᵀ) [out], its scaled copy and the sum with the base output: r + 3·out).
  int64_t adapter_parameters = 0;
  int64_t adapter_activations_per_token = 0;
  // A PEFT adapter hooks the forward: each projection then runs as its own product (without one,
  // q/k/v and gate/up run as one product each, DecoderModel::groups_projections).
  bool adapter = false;
  // The loss fused with the LM head (ops::linear_cross_entropy, as train() and evaluate() take
  // it): logits exist one [chunk, V] block at a time. false: forward()'s whole [N, V] logits and
  // cross_entropy_parts (TrainOptions::fused_loss off, LoRA on the head, a forward for logits).
  bool fused_loss = true;
};

// Bytes of a group of tensors as the allocator hands them out: each rounded up to its 256-byte
// alignment; `dedicated` is the part in tensors large enough for a VkDeviceMemory block of their
// own (the rest shares 256 MiB blocks).
struct TensorBytes {
  uint64_t bytes = 0, dedicated = 0;
  int64_t tensors = 0;
  void add(int64_t elements, int64_t element_size = 4, int64_t count = 1);
  TensorBytes& operator+=(const TensorBytes& o);
};

struct MemoryPlan {
  MemoryPlanInput input;
  std::string model_type;
  int64_t num_layers = 0, parameter_count = 0, trainable_count = 0;
  TensorBytes parameters;       // f32 master weights
  TensorBytes gradients;        // f32, one per trainable parameter
  TensorBytes optimizer_state;  // AdamW: exp_avg and exp_avg_sq
  TensorBytes activations;      // saved for backward (training) or live at the forward's peak
  TensorBytes workspace;        // transients on top of the rest at the peak moment
  TensorBytes inputs;           // token ids, masks, labels, positions, rotary tables
  uint64_t activations_per_layer = 0;
  std::string peak_moment;     // where the step peaks, e.g. "backward, logits gradient"
  std::string workspace_note;  // the largest transient, e.g. "logits gradient [4096, 32000] f32"

  // Tensor bytes at the peak: what the allocator's live bytes reach.
  uint64_t total() const;
  // Device memory those tensors occupy: dedicated blocks plus whole 256 MiB shared blocks.
  uint64_t device_bytes() const;
  // A multi-line breakdown table and a one-line summary for logs.
  std::string table() const;
  std::string summary() const;
};

MemoryPlan plan_memory(const models::ArchSpec& spec, const MemoryPlanInput& input);

// Optimizer state tensors per trainable parameter: AdamW 2, SGD with momentum 1, SGD 0.
int optimizer_moments(PlanOptimizer optimizer);

// Device memory a run may plan on: the device's (budget or heap size, less a safety margin for
// the driver, staging buffers and fragmentation) or max_memory when that is set and smaller.
struct MemoryCapacity {
  uint64_t usable = 0;
  std::string description;  // how `usable` was found, for messages
};
MemoryCapacity usable_capacity(uint64_t max_memory);

// Fails with a vkf::Error naming the estimate, the capacity and what to try (with what a smaller
// batch, a shorter sequence or gradient checkpointing would need) when the plan's device bytes
// exceed capacity.usable.
void require_fits(const models::ArchSpec& spec, const MemoryPlan& plan,
                  const MemoryCapacity& capacity);

// "2GiB", "500MB", "1.5G", "123456" -> bytes. KiB/MiB/GiB/TiB and K/M/G/T are powers of 1024,
// KB/MB/GB/TB powers of 1000; case does not matter. `option` names the option in errors.
uint64_t parse_byte_size(const std::string& text, const std::string& option);
// 1536 -> "1.5 KiB"
std::string format_bytes(uint64_t bytes);

}  // namespace vkf::train
