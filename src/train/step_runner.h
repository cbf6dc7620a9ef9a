// One optimizer step of training -- forward, causal-LM loss and backward over every micro-batch,
// then OptimizerStep's update -- run eagerly or, once its shapes repeat, captured into one
// command buffer and replayed ("no host in the loop"): a replayed step records, allocates and
// uploads nothing, and changes no push constant; the host writes the step's token ids, masks,
// labels, backward seed and AdamW scalars into one host-visible buffer, which the recording
// copies to device memory at its head, and reads the step's [loss sum, grad norm, found_inf] back
// after it. The arithmetic is the eager step's, bit for bit (tests/unit/test_step_runner.cpp):
//   - the mean over the step's counted tokens is folded into the backward seed (S * fl(1/count),
//     exactly the gradient ops::scale's backward would pass on, so the count is data, not code);
//   - AdamW reads its learning-rate and step-number scalars from device memory (ops::AdamW::step
//     with a table), filled by the host as it would fill the push constants.
// A graph is recorded for one key: every micro-batch's [batch, seq] and whether it has a mask,
// and the loss scale (1/S is baked into the unscaling kernels; S changes only on overflow or
// after growth_interval clean steps). A step with a new key runs eagerly (it also builds the
// rotary tables and position ids the recording then reuses), the next step with the same key is
// captured and replayed, and later ones replay. Steps stay eager where replay cannot be the same
// computation: dropout (its masks are drawn from counter offsets fixed in the recording: detected
// when a capture draws from the stream, which then replays that once and goes eager; attention
// dropout uploads its parameters, which a capture refuses, and the run goes eager at once), an
// injected overflow (tests), or replay turned off. The graph's memory (its arena, vk::Stream) is
// what an eager step's activations would take; release() gives it back (before an evaluation pass).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dropout_rng.h"
#include "core/tensor.h"
#include "models/decoder.h"
#include "train/causal_lm.h"
#include "train/optimizer_step.h"
#include "vk/memory.h"
#include "vk/stream.h"

namespace vkf::train {

// One micro-batch as the host holds it, row-major [batch, seq].
struct MicroBatch {
  int64_t batch = 0, seq = 0;
  std::vector<int32_t> ids;
  std::vector<int32_t> mask;            // 1 = token, 0 = padding; empty: no mask (no padding)
  std::vector<int32_t> shifted_labels;  // shift_labels()' output: -100 where nothing is counted
  int64_t counted = 0;                  // labels that are not -100
};

// The backward of one micro-batch from device tensors: forward, loss sum (fused with the head or
// not), then backward from the loss sum seeded with `seed` (a device scalar: the loss scale times
// 1 / the step's counted tokens), accumulating into every gradient. Returns the loss sum ([]).
Tensor backward_from_device(models::DecoderModel& model, const Tensor& ids, const Tensor& mask,
                            const Tensor& shifted_labels, HeadLoss how,
                            dropout_rng::Stream* dropout, const Tensor& seed);

// S * fl(1 / counted) as f32 (S = update.seed_scale()): the seed of a step's backward passes.
float backward_seed_value(const OptimizerStep& update, int64_t counted);

class StepRunner {
 public:
  // `replay` false: every step eager. The model and `update` must outlive the runner.
  StepRunner(models::DecoderModel& model, OptimizerStep& update, HeadLoss how, bool replay);
  ~StepRunner();
  StepRunner(const StepRunner&) = delete;
  StepRunner& operator=(const StepRunner&) = delete;

  // Global step `step` over `micro` (micro-batches with nothing counted are skipped; at least one
  // counts). Waits for the step's figures and returns them (OptimizerStep::finish()).
  StepOutcome run(int64_t step, const std::vector<MicroBatch>& micro, dropout_rng::Stream* dropout);

  // Destroys the graph (and frees its arena); the next step runs eagerly.
  void release();

  int64_t steps() const { return steps_; }  // run() calls
  int64_t replayed_steps() const { return replayed_steps_; }
  int64_t captures() const { return captures_; }
  // Of the last capture: dispatches recorded, and device bytes of its arena.
  uint64_t graph_dispatches() const { return graph_dispatches_; }
  uint64_t arena_bytes() const { return arena_bytes_; }
  // One line: how many steps replayed, and why the others did not.
  std::string summary() const;
  // Why steps run eagerly from now on ("" while replay is possible).
  const std::string& eager_reason() const { return eager_reason_; }

 private:
  struct Key {
    std::vector<int64_t> shapes;  // per micro-batch: batch, seq, has mask, counted > 0
    float scale = 0;
    bool operator==(const Key&) const = default;
  };
  struct MicroTensors {  // one micro-batch on the device (undefined ids: nothing counted)
    Tensor ids, mask, labels;
  };
  struct InputOffsets {  // where a recorded micro-batch's inputs lie in host_in_, in bytes
    uint64_t ids = 0, mask = 0, labels = 0;
  };
  Key key_of(const std::vector<MicroBatch>& micro) const;
  // The backward of every micro-batch that counts, seeded with `seed`; the summed loss ([]).
  Tensor backward_micro_batches(const std::vector<MicroTensors>& inputs, const Tensor& seed,
                                dropout_rng::Stream* dropout);
  // `counted`: the step's counted tokens (every micro-batch's).
  StepOutcome eager(int64_t step, const std::vector<MicroBatch>& micro, int64_t counted,
                    dropout_rng::Stream* dropout);
  // Records the step into graph_ (true), or finds that it cannot be recorded (false: eager from
  // now on, eager_reason_ says why, nothing of the step has run).
  bool capture(int64_t step, const std::vector<MicroBatch>& micro, int64_t counted,
               dropout_rng::Stream* dropout);
  void fill_host_inputs(int64_t step, const std::vector<MicroBatch>& micro, int64_t counted);
  StepOutcome replay();  // the graph, then the figures

  models::DecoderModel& model_;
  OptimizerStep& update_;
  const HeadLoss how_;
  const bool replay_;
  std::string eager_reason_;
  std::optional<Key> warm_key_;  // the key of the last eager step (captured if the next repeats it)
  Key graph_key_;
  std::unique_ptr<vk::Graph> graph_;
  std::vector<MicroTensors> inputs_;  // the recording's inputs, refreshed from host_in_
  std::vector<InputOffsets> input_at_;
  Tensor seed_, step_scalars_, figures_;
  uint64_t seed_at_ = 0, scalars_at_ = 0;
  vk::Allocation host_in_;
  std::vector<float> scalars_;
  int64_t steps_ = 0, replayed_steps_ = 0, captures_ = 0;
  uint64_t graph_dispatches_ = 0, arena_bytes_ = 0;
};

}  // namespace vkf::train
