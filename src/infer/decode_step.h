// The decode step of generation as one unit of GPU work with fixed addresses: every row advances
// by one token per step over a KV cache of fixed capacity, the step's varying values (token ids,
// rotary positions, how many positions the cache holds) live in one small host-visible buffer:
// the embedding reads the ids from it and a copy kernel beside it (the same stage) refreshes the
// device buffer that the layers read positions and the cache length from. The step ends with its
// result in host-visible memory: the argmax's final fold writes each row's token there itself, or
// a copy brings the logits. Nothing is
// allocated, uploaded or read back by the step itself, so after a first step run eagerly (which
// also builds the rotary tables and pipelines) it is captured once (vk::Stream::begin_capture)
// and replayed at every later step: no recording, allocation or push-constant change per token.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "models/decoder.h"
#include "vk/memory.h"
#include "vk/stream.h"

namespace vkf::infer {

// Runners record their steps' input and result as copy commands instead (a copy of the host's
// values into the device buffer before the embedding, and of the tokens out after the argmax),
// each a dependent stage of its own: the form before the host-visible tensors, kept for A/B
// timing (decode_bench --io-copies). Takes effect at the next recording.
void set_decode_io_copies(bool on);

// Diagnostics for benchmarks (decode_bench --gpu-time, --replays-per-step). Replayed steps submit
// their graph `times` times back to back in one submission (the same inputs, so the same results;
// the host waits once): a replay's cost with no host between replays. And the host's time in
// replayed steps: submitting, and waiting for the result.
void set_decode_replays_per_step(uint32_t times);
struct DecodeHostTimes {
  int64_t steps = 0;
  double submit_s = 0, wait_s = 0;
};
DecodeHostTimes& decode_host_times();  // since the program started, or since reset by the caller

class DecodeStepRunner {
 public:
  // `mask`: the key padding mask of every cache slot, [cache.batch, cache.capacity] row-major
  // (1 = token; slots past the prompt are 1). `replay`: capture the step once and replay it (else
  // record it anew at every step). `device_argmax`: the step chooses each row's token by argmax on
  // the device and returns B ids; else it returns the [B, vocab] logits. The model must support
  // decode_step() (DecoderModel::decode_step_unsupported() is empty); model and cache must outlive
  // the runner.
  DecodeStepRunner(models::DecoderModel& model, models::KVCache& cache,
                   std::span<const int32_t> mask, bool replay, bool device_argmax);
  ~DecodeStepRunner();
  DecodeStepRunner(const DecodeStepRunner&) = delete;
  DecodeStepRunner& operator=(const DecodeStepRunner&) = delete;

  // Runs one step: token ids[b] at rotary position positions[b] for every row, written at cache
  // slot cache.length (then cache.length grows by one). Waits for the result.
  void step(std::span<const int32_t> ids, std::span<const int32_t> positions);
  // The last step's result: B ids (device_argmax) or B x vocab logits (otherwise).
  std::span<const int32_t> chosen() const;
  std::span<const float> logits() const;
  // Whether later steps replay a captured graph (true once one has been captured), and how many
  // dispatches it holds.
  bool replaying() const { return graph_ != nullptr; }
  uint64_t graph_dispatches() const { return graph_ ? graph_->dispatch_count() : 0; }
  // The barriers its stage chaining left out (vk::Stream::set_stage_chaining; 0 without).
  uint64_t graph_chain_links() const { return graph_ ? graph_->chain_links() : 0; }

 private:
  void record();  // the step's commands, into the stream or the capture

  models::DecoderModel& model_;
  models::KVCache& cache_;
  const int64_t batch_, vocab_;
  const bool replay_, device_argmax_;
  // I32 [2B + 1]: ids, positions, positions cached; written by the host at every step, and
  // copied into state_ by the step (the ids are read from here).
  Tensor host_state_;
  Tensor state_;                 // the device copy
  models::DecodeInputs inputs_;  // views of both, and the [B, capacity] mask
  Tensor host_ids_;              // device_argmax: I32 [B], host-visible, the step's tokens
  vk::Allocation host_logits_;   // otherwise: [B, vocab] f32, copied into at the step's end
  std::unique_ptr<vk::Graph> graph_;
  int64_t steps_ = 0;
  bool chain_checked_ = false;  // the first replay's chain counters (step())
};

}  // namespace vkf::infer
