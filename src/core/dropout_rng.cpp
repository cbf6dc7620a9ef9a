// The per-thread active dropout stream (see dropout_rng.h).
#include "core/dropout_rng.h"

namespace vkf::dropout_rng {
namespace {
thread_local Stream* g_active = nullptr;
}  // namespace

Stream* active_stream() { return g_active; }

std::optional<Reservation> reserve(uint64_t n) {
  if (!g_active) return std::nullopt;
  const Reservation r{g_active->seed, g_active->offset};
  g_active->offset += n;
  return r;
}

StreamScope::StreamScope(Stream* stream) : previous_(g_active) { g_active = stream; }
StreamScope::~StreamScope() { g_active = previous_; }

}  // namespace vkf::dropout_rng
