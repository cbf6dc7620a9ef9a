// The decode step of generation as one unit of GPU work with fixed addresses: every row advances
// by one token per step over a KV cache of fixed capacity, the step's varying values (token ids,
// rotary positions, how many positions the cache holds) live in one small device buffer that a
// copy from host-visible memory refreshes at the head of the step, and the step ends by copying
// its result (each row's argmax token, or the logits) into host-visible memory. Nothing is
// allocated, uploaded or read back by the step itself, so after a first step run eagerly (which
// also builds the rotary tables and pipelines) it is captured once (vk::Stream::begin_capture)
// and replayed at every later step: no recording, allocation or push-constant change per token.
// Greedy decoding can also run ahead of the host (run_ahead): the step then also writes the next
// step's inputs itself, so the next step is queued before the host has seen this one's tokens.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "models/decoder.h"
#include "vk/memory.h"
#include "vk/stream.h"

namespace vkf::infer {

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
  // Greedy decoding that keeps the GPU busy while the host looks at the tokens (replay and device
  // argmax only): the step for ids at positions, then steps each fed on the device by the one
  // before (its tokens, every position one further), two in flight, so the next step is already
  // queued when one ends; a fed step starts without a host copy. `on_ids` gets each step's B ids
  // in order and returns whether to go on; at most `max_steps` steps are delivered, and no more
  // than the cache holds. A step still in flight when on_ids says stop runs to its end and is
  // dropped: cache.length grows by the delivered steps only (the dropped step's slot is written
  // again by the next step). Rows the caller counts as finished go on with their own tokens,
  // which changes nothing for the others. Returns the steps delivered.
  using IdsCallback = std::function<bool(std::span<const int32_t> ids)>;
  int64_t run_ahead(std::span<const int32_t> ids, std::span<const int32_t> positions,
                    int64_t max_steps, const IdsCallback& on_ids);
  // The last step's result: B ids (device_argmax) or B x vocab logits (otherwise).
  std::span<const int32_t> chosen() const;
  std::span<const float> logits() const;
  // Whether later steps replay a captured graph (true once one has been captured), and how many
  // dispatches it holds.
  // (step()'s graph; run_ahead's two are the same step without the host copy at its head and
  // with decode_advance at its end.)
  bool replaying() const { return graph_ != nullptr; }
  uint64_t graph_dispatches() const { return graph_ ? graph_->dispatch_count() : 0; }
  // The barriers its stage chaining left out (vk::Stream::set_stage_chaining; 0 without).
  uint64_t graph_chain_links() const { return graph_ ? graph_->chain_links() : 0; }

 private:
  // The step's commands, into the stream or a capture. `fed`: the inputs are already in state_
  // (no copy from host_in_), and the step ends by writing the next step's there
  // (ops::decode_advance). The ids go to slot `slot` of host_out_ (device argmax: B ids a slot).
  void record(bool fed = false, int slot = 0);
  // Waits for graph g's replay and checks its chain counters after its first (once per graph).
  void wait_checked(vk::Graph& g, bool& checked);

  models::DecoderModel& model_;
  models::KVCache& cache_;
  const int64_t batch_, vocab_;
  const bool replay_, device_argmax_;
  Tensor state_;  // I32 [2B + 1]: ids, positions, positions cached (refreshed from host_in_)
  models::DecodeInputs inputs_;  // views of state_, and the [B, capacity] mask
  vk::Allocation host_in_, host_out_;
  std::unique_ptr<vk::Graph> graph_;
  std::array<std::unique_ptr<vk::Graph>, 2> ahead_;  // run_ahead's fed steps, result slots 0, 1
  int64_t steps_ = 0;
  bool chain_checked_ = false;  // the first replay's chain counters (step())
  std::array<bool, 2> ahead_checked_{};
};

}  // namespace vkf::infer
