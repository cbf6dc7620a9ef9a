// Stage chaining in captured graphs (see stream.h): where a chained dispatch waits on a counter
// instead of a pipeline barrier, which counter it signals, and the check of a replay's counters.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "vk/context.h"
#include "vk/error.h"
#include "vk/stream.h"

namespace vkf::vk {

ChainSync Stream::chain_sync(std::span<const BufferRange> reads,
                             std::span<const BufferRange> writes, uint64_t workgroups) {
  Graph* g = capture_;
  // (Every slot used: the rest of the graph keeps its barriers. A link may take a new slot.)
  if (!g || !g->chain_counters_ || workgroups > UINT32_MAX ||
      g->chain_expected_.size() + 1 >= kChainSlots) {
    hazard(reads, writes);  // not chained: a barrier where one is due, and no counter
    return {};
  }
  if (!chain_.ready) {  // the zeroing fill may still run: a dispatch can signal after a barrier
    if (!hits_stage(reads, writes) && !hits_chained(reads, writes)) {
      hazard(reads, writes);
      return {};
    }
    full_barrier();  // the one it needs anyway, which orders the fill too
  }
  uint32_t wait_slot = ChainSync::kNoSlot, wait_count = 0;
  if (hits_stage(reads, writes)) {
    if (chain_.stage_chained && chain_.stage_slot != ChainSync::kNoSlot) {
      // The link: this dispatch begins a new stage that waits for every workgroup of the current
      // one, whose wait (if any) covers the stages before it.
      chain_.written_before.insert(chain_.written_before.end(), written_since_barrier_.begin(),
                                   written_since_barrier_.end());
      chain_.read_before.insert(chain_.read_before.end(), read_since_barrier_.begin(),
                                read_since_barrier_.end());
      written_since_barrier_.clear();
      read_since_barrier_.clear();
      chain_.link_slot = chain_.stage_slot;
      chain_.link_count = chain_.stage_count;
      chain_.stage_slot = ChainSync::kNoSlot;
      chain_.stage_count = 0;
      chain_.stage_chained = true;
      ++g->chain_links_;
      wait_slot = chain_.link_slot;
      wait_count = chain_.link_count;
    } else {
      full_barrier();
    }
  } else if (hits_chained(reads, writes)) {
    // Independent of the current stage but not of the ones it waits on: the same wait.
    wait_slot = chain_.link_slot;
    wait_count = chain_.link_count;
  }
  if (chain_.stage_slot == ChainSync::kNoSlot) {
    chain_.stage_slot = static_cast<uint32_t>(g->chain_expected_.size());
    g->chain_expected_.push_back(0);
  }
  chain_.stage_count += static_cast<uint32_t>(workgroups);
  g->chain_expected_[chain_.stage_slot] += static_cast<uint32_t>(workgroups);
  note_access(reads, writes);
  ChainSync sync;
  sync.counters = g->chain_counters_.address();
  sync.slots = wait_slot | (chain_.stage_slot << 16);
  sync.wait_count = wait_count;
  return sync;
}

void Stream::dispatch_chained(const Kernel& kernel, const void* push, uint32_t push_bytes,
                              uint32_t sync_offset, uint32_t groups_x, uint32_t groups_y,
                              uint32_t groups_z, std::span<const BufferRange> reads,
                              std::span<const BufferRange> writes, const DispatchCost& cost) {
  VKF_REQUIRE(sync_offset % 8 == 0 && sync_offset + sizeof(ChainSync) <= push_bytes,
              "kernel {}: its chain fields at byte {} do not fit its {}-byte push block",
              kernel.name, sync_offset, push_bytes);
  if (!dispatch_allowed(kernel, push_bytes, groups_x, groups_y, groups_z)) return;
  unsigned char bytes[kPushConstantBytes];
  std::memcpy(bytes, push, push_bytes);
  const ChainSync sync = chain_sync(reads, writes, uint64_t{groups_x} * groups_y * groups_z);
  std::memcpy(bytes + sync_offset, &sync, sizeof sync);
  if (capture_) capture_->chain_log_.push_back(sync);
  record_dispatch(kernel, bytes, push_bytes, groups_x, groups_y, groups_z, cost);
}

std::string Graph::check_chain_counters() {
  if (!chain_counters_) return "";
  stream_.wait(*this);
  std::vector<uint32_t> got(chain_expected_.size());
  stream_.download(chain_counters_, 0, got.data(), got.size() * 4);
  std::string out;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == chain_expected_[i]) continue;
    if (!out.empty()) out += "; ";
    out += i == 0 ? fmt::format("{} waits gave up", got[i])
                  : fmt::format("slot {}: {} of {} workgroups", i, got[i], chain_expected_[i]);
  }
  return out;
}

}  // namespace vkf::vk
