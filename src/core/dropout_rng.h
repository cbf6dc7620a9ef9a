// Training-time dropout randomness: a per-thread "active dropout stream" {seed, offset}. Dropout
// masks are Philox words of (seed, counter) (src/shaders/philox.glsl), so a stream only has to hand
// out disjoint counter ranges: every dropout site of a forward pass reserves as many counters as it
// has elements and the offset advances past them. The trainer activates its stream around training
// forward passes only; evaluation, generation and parity runs have none, so dropout is off there,
// as in transformers' eval mode. Saving the offset in a checkpoint makes resumed runs draw the
// same masks as an uninterrupted one; activation checkpointing replays a layer's masks by starting
// a copy of the stream at the offset the layer first saw.
#pragma once

#include <cstdint>
#include <optional>

namespace vkf::dropout_rng {

struct Stream {
  uint64_t seed = 0;
  uint64_t offset = 0;  // the next unused counter
};

// A range of counters handed to one dropout site: counters offset .. offset + n - 1 under seed.
struct Reservation {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// The active stream of this thread, or null (dropout off).
Stream* active_stream();

// Reserves n counters of the active stream and advances it; nullopt when no stream is active.
std::optional<Reservation> reserve(uint64_t n);

// Makes `stream` the active stream for its lifetime (null: dropout off), restoring the previous
// one afterwards. The stream must outlive the scope.
class StreamScope {
 public:
  explicit StreamScope(Stream* stream);
  ~StreamScope();
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  Stream* previous_;
};

}  // namespace vkf::dropout_rng
