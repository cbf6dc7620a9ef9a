// The recorded decode step (see decode_step.h).
#include "infer/decode_step.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "ops/decode.h"
#include "vk/context.h"
#include "vk/error.h"

namespace vkf::infer {

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
  host_state_ = Tensor::empty_host_visible({2 * B + 1}, DType::I32);
  std::memset(host_state_.host_data(), 0, static_cast<size_t>(2 * B + 1) * 4);
  state_ = Tensor::zeros({2 * B + 1}, DType::I32);
  // The embedding reads the ids over the bus, once per step (record()); the layers read positions
  // and the cache length many times (every attention), so those come from the device copy.
  inputs_.positions = state_.slice(0, B, 2 * B).reshape({B, 1});
  inputs_.cached = state_.slice(0, 2 * B, 2 * B + 1);
  inputs_.mask = Tensor::from_host_i32(mask, {B, cache.capacity});
  if (device_argmax) {
    host_ids_ = Tensor::empty_host_visible({B}, DType::I32);
  } else {
    host_logits_ = vk::Context::get().allocator().allocate(static_cast<uint64_t>(B * vocab_) * 4,
                                                          vk::MemoryKind::Staging);
  }
}

DecodeStepRunner::~DecodeStepRunner() {
  graph_.reset();  // waits for its last replay, then hands back what it kept
  if (host_logits_) vk::Context::get().stream().release(host_logits_);
}

namespace {
bool g_io_copies = false;
uint32_t g_replays_per_step = 1;
}  // namespace

void set_decode_io_copies(bool on) { g_io_copies = on; }
void set_decode_replays_per_step(uint32_t times) { g_replays_per_step = std::max(times, 1u); }
DecodeHostTimes& decode_host_times() {
  static DecodeHostTimes times;
  return times;
}

void DecodeStepRunner::record() {
  auto& stream = vk::Context::get().stream();
  const int64_t B = batch_;
  if (g_io_copies) {  // the earlier form, for A/B timing (decode_step.h)
    stream.copy(host_state_.allocation(), static_cast<uint64_t>(host_state_.offset()) * 4,
                state_.allocation(), static_cast<uint64_t>(state_.offset()) * 4,
                static_cast<uint64_t>(2 * B + 1) * 4);
    inputs_.ids = state_.slice(0, 0, B).reshape({B, 1});
  } else {
    // A kernel, not a copy command: it runs beside the embedding, in the step's first stage.
    state_.copy_(host_state_);
    inputs_.ids = host_state_.slice(0, 0, B).reshape({B, 1});
  }
  if (device_argmax_ && g_io_copies) {
    Tensor ids;
    model_.decode_step(inputs_, cache_, &ids);
    stream.read_back(ids.allocation(), static_cast<uint64_t>(ids.offset()) * 4,
                     host_ids_.allocation(), static_cast<uint64_t>(host_ids_.offset()) * 4,
                     static_cast<uint64_t>(B) * 4);
  } else if (device_argmax_) {
    Tensor ids = host_ids_;  // decode_step writes the tokens there (its greedy_ids)
    model_.decode_step(inputs_, cache_, &ids);
    VKF_REQUIRE(ids.address() == host_ids_.address(),
                "decode step: the tokens were not written into the host-visible buffer");
  } else {
    const Tensor logits = model_.decode_step(inputs_, cache_, nullptr);
    stream.read_back(logits.allocation(), static_cast<uint64_t>(logits.offset()) * 4,
                     host_logits_, 0, static_cast<uint64_t>(batch_ * vocab_) * 4);
  }
}

void DecodeStepRunner::step(std::span<const int32_t> ids, std::span<const int32_t> positions) {
  const auto B = static_cast<size_t>(batch_);
  VKF_REQUIRE(ids.size() == B && positions.size() == B,
              "decode step: {} ids and {} positions for {} rows", ids.size(), positions.size(), B);
  VKF_REQUIRE(cache_.length < cache_.capacity, "decode step: the KV cache is full ({} positions)",
              cache_.capacity);
  auto* in = static_cast<int32_t*>(host_state_.host_data());
  std::memcpy(in, ids.data(), B * 4);
  std::memcpy(in + B, positions.data(), B * 4);
  in[2 * B] = static_cast<int32_t>(cache_.length);
  auto& stream = vk::Context::get().stream();
  // The first step runs eagerly: it builds what the step reads but never changes (rotary tables
  // covering the whole cache, pipelines), which a capture cannot upload.
  if (replay_ && steps_ > 0 && !graph_) {
    stream.set_graph_simultaneous_use(g_replays_per_step > 1);
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
  }
  if (graph_) {
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    stream.replay(*graph_, g_replays_per_step);
    const auto t1 = clock::now();
    stream.wait(*graph_);
    DecodeHostTimes& times = decode_host_times();
    ++times.steps;
    times.submit_s += std::chrono::duration<double>(t1 - t0).count();
    times.wait_s += std::chrono::duration<double>(clock::now() - t1).count();
    if (!chain_checked_) {  // a chained graph's counters, once (vk::Stream's stage chaining)
      chain_checked_ = true;
      const std::string wrong = graph_->check_chain_counters();
      VKF_REQUIRE(wrong.empty(),
                  "decode step: the chained stages of the replayed step did not all complete "
                  "({}); set VKF_STAGE_CHAIN=0 to record barriers instead",
                  wrong);
    }
  } else {
    record();
    stream.synchronize();
  }
  ++cache_.length;
  ++steps_;
}

std::span<const int32_t> DecodeStepRunner::chosen() const {
  VKF_REQUIRE(device_argmax_, "decode step: this runner returns logits, not ids");
  return {static_cast<const int32_t*>(host_ids_.host_data()), static_cast<size_t>(batch_)};
}

std::span<const float> DecodeStepRunner::logits() const {
  VKF_REQUIRE(!device_argmax_, "decode step: this runner returns ids, not logits");
  return {static_cast<const float*>(host_logits_.mapped()), static_cast<size_t>(batch_ * vocab_)};
}

}  // namespace vkf::infer
