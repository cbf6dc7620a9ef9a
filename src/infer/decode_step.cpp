// The recorded decode step (see decode_step.h).
#include "infer/decode_step.h"

#include <chrono>
#include <cstring>

#include "vk/context.h"
#include "vk/error.h"

namespace vkf::infer {

DecodeHostTimes& decode_host_times() {
  static DecodeHostTimes times;
  return times;
}

DecodeStepRunner::DecodeStepRunner(models::DecoderModel& model, models::KVCache& cache,
                                   std::span<const int32_t> mask, bool replay, bool device_argmax)
    : model_(model),
      cache_(cache),
      batch_(cache.batch),
      vocab_(model.spec().vocab_size),
      replay_(replay),
      device_argmax_(device_argmax) {
  const std::string why = model.decode_step_unsupported();
  VKF_REQUIRE(why.empty(), "{}: the recorded decode step is not available: {}",
              model.spec().model_type, why);
  const int64_t B = batch_;
  VKF_REQUIRE(static_cast<int64_t>(mask.size()) == B * cache.capacity,
              "decode step: the mask has {} values for a [{}, {}] cache", mask.size(), B,
              cache.capacity);
  VKF_REQUIRE(!device_argmax || B <= ops::kArgmaxAdvanceMaxRows,
              "decode step: the device argmax takes at most {} rows, got {}",
              ops::kArgmaxAdvanceMaxRows, B);
  host_state_ = Tensor::empty_host_visible({2 * B + 1}, DType::I32);
  std::memset(host_state_.host_data(), 0, static_cast<size_t>(2 * B + 1) * 4);
  state_ = Tensor::zeros({2 * B + 1}, DType::I32);
  inputs_.positions = state_.slice(0, B, 2 * B).reshape({B, 1});
  inputs_.cached = state_.slice(0, 2 * B, 2 * B + 1);
  inputs_.mask = Tensor::from_host_i32(mask, {B, cache.capacity});
  if (device_argmax) {
    inputs_.ids = state_.slice(0, 0, B).reshape({B, 1});
    advance_.state = state_;
    advance_.ring = Tensor::empty_host_visible({kMaxRunSteps, B}, DType::I32);
    // One row: the head's product advances the step in its own dispatch, where the device can.
    if (B == 1) advance_.fold_record = ops::argmax_fold_record(advance_);
    inputs_.advance = &advance_;
  } else {
    // The embedding reads the host's ids over the bus, once per step, beside the copy kernel that
    // refreshes state_ (record()); the layers read positions and the cache length many times
    // (every attention), so those come from the device copy.
    inputs_.ids = host_state_.slice(0, 0, B).reshape({B, 1});
    host_logits_ = vk::Context::get().allocator().allocate(static_cast<uint64_t>(B * vocab_) * 4,
                                                          vk::MemoryKind::Staging);
  }
  embedded_ = model.decode_embedded_input(inputs_.ids);
  if (embedded_.table.defined()) inputs_.embedded = &embedded_;
}

DecodeStepRunner::~DecodeStepRunner() {
  graph_.reset();  // waits for its last replay, then hands back what it kept
  if (host_logits_) vk::Context::get().stream().release(host_logits_);
}

void DecodeStepRunner::record() {
  if (device_argmax_) {
    Tensor ids;  // the advance writes the tokens into state_ and the ring
    model_.decode_step(inputs_, cache_, &ids);
    return;
  }
  // A kernel, not a copy command: it runs beside the embedding, in the step's first stage.
  state_.copy_(host_state_);
  const Tensor logits = model_.decode_step(inputs_, cache_, nullptr);
  vk::Context::get().stream().read_back(logits.allocation(),
                                        static_cast<uint64_t>(logits.offset()) * 4, host_logits_, 0,
                                        static_cast<uint64_t>(batch_ * vocab_) * 4);
}

void DecodeStepRunner::capture() {
  const auto t0 = std::chrono::steady_clock::now();
  auto& stream = vk::Context::get().stream();
  // Several replays of one run are pending at once (submitted together).
  stream.set_graph_simultaneous_use(true);
  stream.begin_capture();
  try {
    record();
  } catch (...) {
    stream.end_capture();
    stream.set_graph_simultaneous_use(false);
    throw;
  }
  graph_ = stream.end_capture();
  stream.set_graph_simultaneous_use(false);
  decode_host_times().capture_s +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void DecodeStepRunner::prepare() {
  if (!replay_ || graph_) return;
  model_.prepare_decode(cache_);
  capture();
}

void DecodeStepRunner::require_cache_room(int64_t steps) const {
  VKF_REQUIRE(cache_.length + steps <= cache_.capacity,
              "decode step: {} steps do not fit in the KV cache ({} of {} positions used)", steps,
              cache_.length, cache_.capacity);
}

void DecodeStepRunner::submit(std::span<const int32_t> ids, std::span<const int32_t> positions,
                              int64_t steps) {
  const auto B = static_cast<size_t>(batch_);
  VKF_REQUIRE(ids.size() == B && positions.size() == B,
              "decode step: {} ids and {} positions for {} rows", ids.size(), positions.size(), B);
  VKF_REQUIRE(steps >= 1 && steps <= kMaxRunSteps && (steps == 1 || device_argmax_),
              "decode step: {} steps in one run (1 to {}, more than one only with the device "
              "argmax)",
              steps, kMaxRunSteps);
  VKF_REQUIRE(queued_.empty(),
              "decode step: a run from the host's tokens was submitted while {} runs were queued "
              "(wait_next() for them first)",
              queued_.size());
  require_cache_room(steps);
  auto* in = static_cast<int32_t*>(host_state_.host_data());
  std::memcpy(in, ids.data(), B * 4);
  std::memcpy(in + B, positions.data(), B * 4);
  in[2 * B] = static_cast<int32_t>(cache_.length);
  auto& stream = vk::Context::get().stream();
  if (device_argmax_) {  // the run's first inputs; later steps advance them on the device
    stream.copy(host_state_.allocation(), static_cast<uint64_t>(host_state_.offset()) * 4,
                state_.allocation(), static_cast<uint64_t>(state_.offset()) * 4,
                static_cast<uint64_t>(2 * B + 1) * 4);
  }
  Run run{cache_.length, steps, false};
  current_ = Run{};  // its ring rows are this run's to overwrite: chosen() refuses them now
  DecodeHostTimes& times = decode_host_times();
  int64_t done = 0;
  while (done < steps && !graph_) {
    // The first step runs eagerly: it builds what the step reads but never changes (rotary tables
    // covering the whole cache, pipelines), which a capture cannot upload.
    if (replay_ && steps_ > 0) {
      capture();
      break;
    }
    const auto t0 = std::chrono::steady_clock::now();
    record();
    ++done;
    ++steps_;
    // Where the capture follows in this run, it records while the GPU runs this step (the
    // replay starts after it, in queue order, and the run waits for the replay).
    if (replay_ && done < steps) {
      stream.submit();
    } else {
      stream.synchronize();
    }
    times.eager_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (done < steps) replay(run, steps - done);
  cache_.length += steps;
  queued_.push_back(run);
}

void DecodeStepRunner::replay(Run& run, int64_t steps) {
  const auto t0 = std::chrono::steady_clock::now();
  vk::Context::get().stream().replay(*graph_, static_cast<uint32_t>(steps));
  DecodeHostTimes& times = decode_host_times();
  times.submit_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++times.runs;
  times.steps += steps;
  steps_ += steps;
  run.replayed = true;
}

int64_t DecodeStepRunner::queue_room() const {
  int64_t used = current_.steps;
  for (const Run& r : queued_) used += r.steps;
  return kMaxRunSteps - used;
}

void DecodeStepRunner::submit_next(int64_t steps) {
  VKF_REQUIRE(device_argmax_ && graph_,
              "decode step: runs queue behind one another only with the device argmax, replayed "
              "(after a first submit())");
  VKF_REQUIRE(steps >= 1 && steps <= queue_room(),
              "decode step: {} steps queued where the ring has room for {} more", steps,
              queue_room());
  require_cache_room(steps);
  Run run{cache_.length, steps, false};
  replay(run, steps);
  cache_.length += steps;
  queued_.push_back(run);
}

void DecodeStepRunner::wait_next() {
  VKF_REQUIRE(!queued_.empty(), "decode step: wait_next() with no run queued");
  const Run run = queued_.front();
  auto& stream = vk::Context::get().stream();
  if (run.replayed) {
    const auto t0 = std::chrono::steady_clock::now();
    stream.wait_oldest(*graph_);
    decode_host_times().wait_s +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  queued_.pop_front();
  current_ = run;
  if (!chain_checked_ && run.replayed && stream.pending(*graph_) == 0) {
    // A chained graph's counters, once, when no other replay is running (vk::Stream's stage
    // chaining).
    chain_checked_ = true;
    const std::string wrong = graph_->check_chain_counters();
    VKF_REQUIRE(wrong.empty(),
                "decode step: the chained stages of the replayed step did not all complete "
                "({}); set VKF_STAGE_CHAIN=0 to record barriers instead",
                wrong);
  }
}

std::span<const int32_t> DecodeStepRunner::chosen(int64_t i) const {
  VKF_REQUIRE(device_argmax_, "decode step: this runner returns logits, not ids");
  VKF_REQUIRE(i >= 0 && i < current_.steps, "decode step: step {} of a run of {}", i,
              current_.steps);
  const int64_t slot = (current_.first_slot + i) % kMaxRunSteps;
  return {static_cast<const int32_t*>(advance_.ring.host_data()) + slot * batch_,
          static_cast<size_t>(batch_)};
}

std::span<const float> DecodeStepRunner::logits() const {
  VKF_REQUIRE(!device_argmax_, "decode step: this runner returns ids, not logits");
  return {static_cast<const float*>(host_logits_.mapped()), static_cast<size_t>(batch_ * vocab_)};
}

}  // namespace vkf::infer
