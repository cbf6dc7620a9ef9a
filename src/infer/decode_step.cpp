// The recorded decode step (see decode_step.h).
#include "infer/decode_step.h"

#include <algorithm>
#include <cstring>
#include <vector>

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
  state_ = Tensor::zeros({2 * B + 1}, DType::I32);
  inputs_.ids = state_.slice(0, 0, B).reshape({B, 1});
  inputs_.positions = state_.slice(0, B, 2 * B).reshape({B, 1});
  inputs_.cached = state_.slice(0, 2 * B, 2 * B + 1);
  inputs_.mask = Tensor::from_host_i32(mask, {B, cache.capacity});
  auto& alloc = vk::Context::get().allocator();
  host_in_ = alloc.allocate(static_cast<uint64_t>(2 * B + 1) * 4, vk::MemoryKind::Staging);
  // Device argmax: two slots of B ids (run_ahead's two steps in flight; step() uses slot 0).
  host_out_ = alloc.allocate(static_cast<uint64_t>(device_argmax ? 2 * B : B * vocab_) * 4,
                             vk::MemoryKind::Staging);
}

DecodeStepRunner::~DecodeStepRunner() {
  graph_.reset();  // waits for its last replay, then hands back what it kept
  for (auto& g : ahead_) g.reset();
  auto& stream = vk::Context::get().stream();
  stream.release(host_in_);
  stream.release(host_out_);
}

void DecodeStepRunner::record(bool fed, int slot) {
  auto& stream = vk::Context::get().stream();
  if (!fed)
    stream.copy(host_in_, 0, state_.allocation(), static_cast<uint64_t>(state_.offset()) * 4,
                static_cast<uint64_t>(2 * batch_ + 1) * 4);
  Tensor ids;  // the head may choose the tokens itself (decode_step's greedy_ids)
  const Tensor logits = model_.decode_step(inputs_, cache_, device_argmax_ ? &ids : nullptr);
  if (device_argmax_) {
    if (!ids.defined()) ids = ops::argmax_rows(logits);  // [B, 1, V]
    if (fed) ops::decode_advance(state_, ids.reshape({batch_}));
    stream.read_back(ids.allocation(), static_cast<uint64_t>(ids.offset()) * 4, host_out_,
                     static_cast<uint64_t>(slot * batch_) * 4, static_cast<uint64_t>(batch_) * 4);
  } else {
    stream.read_back(logits.allocation(), static_cast<uint64_t>(logits.offset()) * 4, host_out_, 0,
                     static_cast<uint64_t>(batch_ * vocab_) * 4);
  }
}

void DecodeStepRunner::step(std::span<const int32_t> ids, std::span<const int32_t> positions) {
  const auto B = static_cast<size_t>(batch_);
  VKF_REQUIRE(ids.size() == B && positions.size() == B,
              "decode step: {} ids and {} positions for {} rows", ids.size(), positions.size(), B);
  VKF_REQUIRE(cache_.length < cache_.capacity, "decode step: the KV cache is full ({} positions)",
              cache_.capacity);
  auto* in = static_cast<int32_t*>(host_in_.mapped());
  std::memcpy(in, ids.data(), B * 4);
  std::memcpy(in + B, positions.data(), B * 4);
  in[2 * B] = static_cast<int32_t>(cache_.length);
  auto& stream = vk::Context::get().stream();
  // The first step runs eagerly: it builds what the step reads but never changes (rotary tables
  // covering the whole cache, pipelines), which a capture cannot upload.
  if (replay_ && steps_ > 0 && !graph_) {
    stream.begin_capture();
    try {
      record();
    } catch (...) {
      stream.end_capture();
      throw;
    }
    graph_ = stream.end_capture();
  }
  if (graph_) {
    stream.replay(*graph_);
    wait_checked(*graph_, chain_checked_);
  } else {
    record();
    stream.synchronize();
  }
  ++cache_.length;
  ++steps_;
}

void DecodeStepRunner::wait_checked(vk::Graph& g, bool& checked) {
  vk::Context::get().stream().wait(g);
  if (checked) return;
  checked = true;  // a chained graph's counters, once (vk::Stream's stage chaining)
  const std::string wrong = g.check_chain_counters();
  VKF_REQUIRE(wrong.empty(),
              "decode step: the chained stages of the replayed step did not all complete ({}); "
              "set VKF_STAGE_CHAIN=0 to record barriers instead",
              wrong);
}

int64_t DecodeStepRunner::run_ahead(std::span<const int32_t> ids,
                                    std::span<const int32_t> positions, int64_t max_steps,
                                    const IdsCallback& on_ids) {
  VKF_REQUIRE(replay_ && device_argmax_,
              "decode step: run_ahead needs a replayed step with the device argmax");
  const auto B = static_cast<size_t>(batch_);
  VKF_REQUIRE(ids.size() == B && positions.size() == B,
              "decode step: {} ids and {} positions for {} rows", ids.size(), positions.size(), B);
  int64_t delivered = 0;
  std::vector<int32_t> next_ids(ids.begin(), ids.end()),
      next_pos(positions.begin(), positions.end());
  if (max_steps > 0 && steps_ == 0) {
    // The first step runs eagerly (see step()); the fed ones start from its tokens.
    step(ids, positions);
    ++delivered;
    const auto got = chosen();
    if (!on_ids(got)) return delivered;
    next_ids.assign(got.begin(), got.end());
    for (auto& p : next_pos) ++p;
  }
  const int64_t todo = std::min(max_steps - delivered, cache_.capacity - cache_.length);
  if (todo <= 0) return delivered;
  auto& stream = vk::Context::get().stream();
  for (int g = 0; g < 2; ++g) {
    if (ahead_[static_cast<size_t>(g)]) continue;
    stream.begin_capture();
    try {
      record(/*fed=*/true, g);
    } catch (...) {
      stream.end_capture();
      throw;
    }
    ahead_[static_cast<size_t>(g)] = stream.end_capture();
  }
  // The first fed step's inputs come from the host once; every later one's from the step before.
  auto* in = static_cast<int32_t*>(host_in_.mapped());
  std::memcpy(in, next_ids.data(), B * 4);
  std::memcpy(in + B, next_pos.data(), B * 4);
  in[2 * B] = static_cast<int32_t>(cache_.length);
  stream.copy(host_in_, 0, state_.allocation(), static_cast<uint64_t>(state_.offset()) * 4,
              static_cast<uint64_t>(2 * B + 1) * 4);
  // Step i replays graph i % 2 and leaves its ids in slot i % 2; at most two are in flight.
  int64_t submitted = 0, finished = 0;
  bool go_on = true;
  stream.replay(*ahead_[0]);
  ++submitted;
  if (todo > 1) {
    stream.replay(*ahead_[1]);
    ++submitted;
  }
  std::vector<int32_t> got(B);
  const auto* out = static_cast<const int32_t*>(host_out_.mapped());
  while (finished < submitted) {
    const auto g = static_cast<size_t>(finished % 2);
    wait_checked(*ahead_[g], ahead_checked_[g]);
    ++finished;
    if (!go_on) continue;  // dropped: the caller stopped before it
    std::memcpy(got.data(), out + g * B, B * 4);
    ++cache_.length;
    ++steps_;
    ++delivered;
    go_on = on_ids(got);
    // The graph just waited for is free again: it becomes the step after the one in flight.
    if (go_on && submitted < todo) {
      stream.replay(*ahead_[g]);
      ++submitted;
    }
  }
  return delivered;
}

std::span<const int32_t> DecodeStepRunner::chosen() const {
  VKF_REQUIRE(device_argmax_, "decode step: this runner returns logits, not ids");
  return {static_cast<const int32_t*>(host_out_.mapped()), static_cast<size_t>(batch_)};
}

std::span<const float> DecodeStepRunner::logits() const {
  VKF_REQUIRE(!device_argmax_, "decode step: this runner returns ids, not logits");
  return {static_cast<const float*>(host_out_.mapped()), static_cast<size_t>(batch_ * vocab_)};
}

}  // namespace vkf::infer
