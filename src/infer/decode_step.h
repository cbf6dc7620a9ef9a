// The decode step of generation as one unit of GPU work with fixed addresses: every row advances
// by one token per step over a KV cache of fixed capacity, and the step's varying values (token
// ids, rotary positions, how many positions the cache holds) live in one small device buffer.
// With the greedy choice on the device, the step's argmax writes the next step's values there
// itself (ops::ArgmaxAdvance) and its tokens into a host-visible ring, so steps can follow one
// another with no host in between: run() submits several back to back and waits once (on the
// H200 a 1B step submitted and waited for on its own took about 0.05 ms more than one of
// replays submitted together, 5% of the step; bench/RESULTS.md), and submit_next() queues the
// next run behind one still running, so that the GPU need not wait for the host between runs.
// Returning logits instead (for sampling), every step takes the host's tokens: the embedding reads
// them from host-visible memory, a copy kernel beside it refreshes the device buffer, and a copy
// brings the logits back. Nothing is allocated or recorded by a step, so after a first step run
// eagerly (which also builds the rotary tables and pipelines) it is captured once
// (vk::Stream::begin_capture) and replayed at every later step; or prepare() captures it before
// any step runs.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "models/decoder.h"
#include "ops/decode.h"
#include "vk/memory.h"
#include "vk/stream.h"

namespace vkf::infer {

// A diagnostic for benchmarks (decode_bench --gpu-time): the host's time in replayed runs,
// submitting and waiting for the result, and in the first (eager) step and the capture.
struct DecodeHostTimes {
  int64_t runs = 0, steps = 0;
  double submit_s = 0, wait_s = 0;
  double eager_s = 0, capture_s = 0;
};
DecodeHostTimes& decode_host_times();  // since the program started, or since reset by the caller

class DecodeStepRunner {
 public:
  // The most steps one run() takes (the ring's rows).
  static constexpr int64_t kMaxRunSteps = 64;

  // `mask`: the key padding mask of every cache slot, [cache.batch, cache.capacity] row-major
  // (1 = token; slots past the prompt are 1). `replay`: capture the step once and replay it (else
  // record it anew at every step). `device_argmax`: the step chooses each row's token by argmax on
  // the device and returns B ids (at most ops::kArgmaxAdvanceMaxRows rows); else it returns the
  // [B, vocab] logits. The model must support decode_step() (DecoderModel::
  // decode_step_unsupported() is empty); model and cache must outlive the runner.
  DecodeStepRunner(models::DecoderModel& model, models::KVCache& cache,
                   std::span<const int32_t> mask, bool replay, bool device_argmax);
  ~DecodeStepRunner();
  DecodeStepRunner(const DecodeStepRunner&) = delete;
  DecodeStepRunner& operator=(const DecodeStepRunner&) = delete;

  // Runs one step: token ids[b] at rotary position positions[b] for every row, written at cache
  // slot cache.length (then cache.length grows by one). Waits for the result.
  void step(std::span<const int32_t> ids, std::span<const int32_t> positions) {
    run(ids, positions, 1);
  }
  // Runs `steps` steps (1..kMaxRunSteps; more than one only with device_argmax): the first as
  // step() does, each later one on the tokens the step before chose, every row's position one
  // further; cache.length grows by `steps`. Replayed, all are submitted at once and waited for
  // once. The same tokens as that many step() calls fed with the chosen tokens.
  void run(std::span<const int32_t> ids, std::span<const int32_t> positions, int64_t steps) {
    submit(ids, positions, steps);
    wait_next();
  }
  // run() in parts, so that runs queue behind one another on the GPU while the host reads the
  // last one's tokens: submit() starts a run as run() does (nothing may be queued), submit_next()
  // queues `steps` more that go on from the device's own state where the runs before it end
  // (device_argmax, replaying), and wait_next() waits for the oldest queued run, whose results
  // chosen() then returns. The ring holds the results of the runs queued and of the last one
  // waited for: queue_room() steps more fit.
  void submit(std::span<const int32_t> ids, std::span<const int32_t> positions, int64_t steps);
  void submit_next(int64_t steps);
  void wait_next();
  int64_t queue_room() const;
  // Replaying: builds what the step reads but never changes (DecoderModel::prepare_decode) and
  // captures the step now, so that no step runs eagerly first; the capture records while work
  // submitted before it runs (generate's prefill, set_decode_capture_during_prefill).
  void prepare();
  // The last run waited for: step i's B ids (device_argmax; i < its steps; chosen() is the last
  // step's), or the last step's B x vocab logits (otherwise).
  std::span<const int32_t> chosen(int64_t i) const;
  std::span<const int32_t> chosen() const { return chosen(current_.steps - 1); }
  std::span<const float> logits() const;
  // Whether later steps replay a captured graph (true once one has been captured), and how many
  // dispatches it holds.
  bool replaying() const { return graph_ != nullptr; }
  uint64_t graph_dispatches() const { return graph_ ? graph_->dispatch_count() : 0; }
  // The barriers its stage chaining left out (vk::Stream::set_stage_chaining; 0 without).
  uint64_t graph_chain_links() const { return graph_ ? graph_->chain_links() : 0; }

 private:
  // A run's ring rows (from first_slot, mod kMaxRunSteps) and whether a replay of the graph is
  // part of it (one submission to wait for).
  struct Run {
    int64_t first_slot = 0, steps = 0;
    bool replayed = false;
  };

  void record();  // the step's commands, into the stream or the capture
  void capture();
  void replay(Run& run, int64_t steps);  // submits the graph `steps` times for `run`
  void require_cache_room(int64_t steps) const;  // the cache holds `steps` more positions

  models::DecoderModel& model_;
  models::KVCache& cache_;
  const int64_t batch_, vocab_;
  const bool replay_, device_argmax_;
  // I32 [2B + 1]: ids, positions, positions cached, as the host sets them for a run's first step.
  Tensor host_state_;
  Tensor state_;                 // the device copy that the steps read (and advance)
  models::DecodeInputs inputs_;  // views of state_ (logits runners: the ids of host_state_)
  ops::ArgmaxAdvance advance_;   // device_argmax: state_, and the host-visible ring of tokens
  ops::EmbeddedInput embedded_;  // one row: the first products read the token's embedding
  vk::Allocation host_logits_;   // otherwise: [B, vocab] f32, copied into at the step's end
  std::unique_ptr<vk::Graph> graph_;
  int64_t steps_ = 0;
  std::deque<Run> queued_;      // submitted, not yet waited for, oldest first
  Run current_;                 // the last run waited for
  bool chain_checked_ = false;  // the first replay's chain counters (run())
};

}  // namespace vkf::infer
