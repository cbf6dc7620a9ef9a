// Command recording and submission. Ops append dispatches, copies and fills to the current command
// buffer; the stream inserts a memory barrier only when a command touches a buffer range that an
// earlier command wrote (or, for writes, read) since the last barrier. Work is submitted in batches
// and the host waits only when it must read a result (download) or on synchronize().
// With profiling on, every dispatch is bracketed by GPU timestamps and aggregated per label.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "vk/memory.h"
#include "vk/pipeline.h"

namespace vkf::vk {

class Context;

struct BufferRange {
  uint32_t block = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  bool overlaps(const BufferRange& o) const {
    return block == o.block && offset < o.offset + o.size && o.offset < offset + size;
  }
};

inline BufferRange range_of(const Allocation& a) { return {a.block_id(), a.offset, a.size}; }

struct KernelProfile {
  std::string label;
  uint64_t calls = 0;
  double total_ms = 0;
  double flops = 0;  // total floating-point operations, where the op declared them
  double bytes = 0;  // total bytes moved, where the op declared them
};

struct DispatchCost {
  double flops = 0;
  double bytes = 0;
};

class Stream {
 public:
  explicit Stream(Context& ctx);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Records one dispatch. `push` is copied into the push-constant block (at most 128 bytes).
  void dispatch(const Kernel& kernel, const void* push, uint32_t push_bytes, uint32_t groups_x,
                uint32_t groups_y, uint32_t groups_z, std::span<const BufferRange> reads,
                std::span<const BufferRange> writes, const DispatchCost& cost = {});
  void copy(const Allocation& src, uint64_t src_offset, const Allocation& dst, uint64_t dst_offset,
            uint64_t bytes);
  void fill(const Allocation& dst, uint64_t offset, uint64_t bytes, uint32_t pattern);
  // Copies host data into device memory through a staging buffer; returns without waiting.
  void upload(const void* data, const Allocation& dst, uint64_t dst_offset, uint64_t bytes);
  // Copies device memory to the host; submits and waits (the one place a host wait is needed).
  void download(const Allocation& src, uint64_t src_offset, void* data, uint64_t bytes);

  void submit();       // sends what is recorded, without waiting
  void synchronize();  // sends what is recorded and waits for all work to finish
  // Frees `a` once every command recorded so far has completed.
  void release(const Allocation& a);

  void set_profiling(bool on);
  bool profiling() const { return profiling_; }
  // Per-label totals since profiling was turned on (synchronizes first).
  std::vector<KernelProfile> profile();
  uint64_t dispatch_count() const { return dispatches_total_; }
  uint64_t barrier_count() const { return barriers_total_; }

 private:
  struct Batch {
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    VkFence fence = VK_NULL_HANDLE;
    VkQueryPool queries = VK_NULL_HANDLE;
    std::vector<Allocation> to_free;
    std::vector<std::pair<std::string, DispatchCost>> timed;  // label per timestamp pair
    uint32_t commands = 0;
    uint32_t limit = 0;  // submitted once it holds this many commands
    bool recording = false;
  };
  Batch& current();
  void begin(Batch& b);
  void hazard(std::span<const BufferRange> reads, std::span<const BufferRange> writes);
  void full_barrier();
  void retire(Batch& b);
  void wait_all();
  void collect_timestamps(Batch& b);

  Context& ctx_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  std::vector<Batch> free_batches_;
  std::vector<Batch> in_flight_;
  Batch recording_;
  bool has_recording_ = false;
  std::vector<BufferRange> written_since_barrier_;
  std::vector<BufferRange> read_since_barrier_;
  bool profiling_ = false;
  std::map<std::string, KernelProfile> profile_;
  uint64_t dispatches_total_ = 0;
  uint64_t barriers_total_ = 0;
  // Batch sizes: a batch begun while the GPU is idle (after a synchronize, e.g. the per-step loss
  // read) is submitted after kFirstBatchCommands so the GPU starts at once; each following batch
  // doubles, up to kCommandsPerBatch, which keeps submissions rare once the GPU is busy.
  static constexpr uint32_t kFirstBatchCommands = 16;
  static constexpr uint32_t kCommandsPerBatch = 512;
  uint32_t last_batch_limit_ = kFirstBatchCommands;
};

}  // namespace vkf::vk
