// Device memory: large VkDeviceMemory blocks, each wholly covered by one VkBuffer with a device
// address, sub-allocated first-fit. Shaders reach tensors through buffer device addresses, so a
// tensor can be larger than maxStorageBufferRange (128 MiB on lavapipe) without slicing.
// Host-visible blocks serve as staging for uploads and downloads.
// The allocator also keeps the figures memory planning needs: bytes of live tensor allocations
// (and their peak), and the device's usable capacity (heap size, VK_EXT_memory_budget's budget).
#pragma once

#include <vulkan/vulkan.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

namespace vkf::vk {

struct DeviceInfo;

enum class MemoryKind { Device, Staging };

// Every allocation is rounded up to kAllocationAlignment. Device allocations of at most
// kDeviceBlockBytes / 4 share blocks of kDeviceBlockBytes; larger ones get a block of their own.
// (Memory planning counts bytes the same way.) A freed block of its own is kept and handed to the
// next large allocation it fits without wasting more than 1/kReuseSlackDivisor of itself: a
// training step frees and re-allocates the same large activations every step, and a fresh
// VkDeviceMemory costs the driver milliseconds (it clears the memory). Kept blocks go back to
// the driver before a new block would exceed the heap or budget, when an allocation fails, or on
// release_cached_memory().
constexpr uint64_t kAllocationAlignment = 256;
constexpr uint64_t kDeviceBlockBytes = 256ull << 20;
constexpr uint64_t kSharedAllocationMax = kDeviceBlockBytes / 4;
constexpr uint64_t kReuseSlackDivisor = 8;

struct Block {
  uint32_t id = 0;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceAddress address = 0;
  uint64_t size = 0;
  void* mapped = nullptr;  // non-null for host-visible memory
  MemoryKind kind = MemoryKind::Device;
  bool dedicated = false;
  std::map<uint64_t, uint64_t> free_ranges;  // offset -> size
  uint64_t used = 0;
};

// A sub-range of a block. Copyable handle; ownership is managed by the caller (see core/Storage).
struct Allocation {
  Block* block = nullptr;
  uint64_t offset = 0;
  uint64_t size = 0;

  explicit operator bool() const { return block != nullptr; }
  VkDeviceAddress address() const { return block->address + offset; }
  VkBuffer buffer() const { return block->buffer; }
  uint32_t block_id() const { return block->id; }
  void* mapped() const { return block->mapped ? static_cast<char*>(block->mapped) + offset : nullptr; }
};

struct MemoryStats {
  uint64_t device_bytes_in_use = 0;
  uint64_t device_bytes_reserved = 0;
  uint64_t peak_device_bytes_in_use = 0;
};

// Device (not staging) memory, in bytes as allocated (sizes rounded up to the 256-byte alignment).
// "Live" allocations belong to an owner (a tensor's storage) that has not released them yet;
// "held" ones also include those released but still waiting for queued GPU work that may use
// them (the stream returns them to the allocator once that work has finished). Live bytes are a
// property of the program (deterministic, what a memory plan predicts); held bytes also depend
// on how far the GPU lags behind the host. Peaks are since the last reset_memory_peak().
struct DeviceMemoryStats {
  uint64_t live_bytes = 0, peak_live_bytes = 0;
  uint64_t held_bytes = 0, peak_held_bytes = 0;
  uint64_t reserved_bytes = 0, peak_reserved_bytes = 0;  // VkDeviceMemory blocks
  uint64_t cached_bytes = 0;  // of reserved: freed blocks kept for reuse (no live tensor in them)
};

// How much device memory there is. heap_bytes is the size of the heap tensors are allocated from;
// with VK_EXT_memory_budget, budget_bytes is the driver's estimate of what this process may
// allocate from it in all (including what it already holds: usage_bytes), which is lower than the
// heap on a GPU that other processes share.
struct DeviceCapacity {
  uint64_t heap_bytes = 0;
  std::optional<uint64_t> budget_bytes, usage_bytes;
  // The budget when known, else the heap size.
  uint64_t total() const { return budget_bytes ? std::min(*budget_bytes, heap_bytes) : heap_bytes; }
};

class Allocator {
 public:
  Allocator(VkPhysicalDevice physical, VkDevice device, const DeviceInfo& info);
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  Allocation allocate(uint64_t bytes, MemoryKind kind);
  void free(const Allocation& allocation);
  const MemoryStats& stats() const { return stats_; }
  void reset_peak() { stats_.peak_device_bytes_in_use = stats_.device_bytes_in_use; }

  // Accounting for memory planning (see DeviceMemoryStats). The owner of a device allocation
  // calls released() when it gives the allocation up, before the deferred free().
  void released(const Allocation& allocation);
  DeviceMemoryStats device_stats() const { return accounting_; }
  void reset_device_peaks();
  DeviceCapacity capacity() const;
  // Gives every kept (freed, unused) dedicated block back to the driver; returns the bytes.
  uint64_t release_cached();

  // Capture arenas (vk::Stream::begin_capture): memory freed while a graph is being recorded is
  // reused by the recording, so kept blocks may already be referenced by its commands. While
  // held, release_cached() gives nothing back (a block may still be referenced by the capture).
  void hold_cached_blocks(bool hold) { hold_cached_ = hold; }
  // The free parts of device block `block_id`'s bytes [offset, offset + size), allocated as they
  // are (a kept dedicated block whole): what a graph claims at the end of its capture so that its
  // recorded addresses stay its own. In use and held, not live: like the tensors a graph keeps
  // after their owners released them, they belong to the graph, not to a tensor of the program.
  std::vector<Allocation> claim_free(uint32_t block_id, uint64_t offset, uint64_t size);

 private:
  Block* new_block(uint64_t size, MemoryKind kind, bool dedicated);
  // new_block, and when the driver is out of memory, release_cached() and one more try.
  Block* new_block_reclaiming(uint64_t size, MemoryKind kind, bool dedicated);
  Block* reuse_cached(uint64_t size);
  void destroy_block(Block* block);
  void drop_block(Block* block);  // destroy_block, and forget it (blocks_, reserved bytes)
  uint32_t memory_type(MemoryKind kind) const;
  uint64_t available_bytes(MemoryKind kind) const;
  VkPhysicalDeviceMemoryBudgetPropertiesEXT query_budget() const;

  VkPhysicalDevice physical_;
  VkDevice device_;
  bool memory_budget_;
  VkPhysicalDeviceMemoryProperties props_{};
  std::vector<std::unique_ptr<Block>> blocks_;
  std::multimap<uint64_t, Block*> cached_dedicated_;  // size -> freed dedicated device block
  uint32_t next_block_id_ = 1;
  bool hold_cached_ = false;
  MemoryStats stats_;
  DeviceMemoryStats accounting_;
  void account(int64_t live, int64_t held, int64_t reserved);
  void count_in_use(uint64_t size, bool live);  // a device allocation handed out: in use, held
};

// The current context's figures (creates the context when none exists).
DeviceMemoryStats memory_stats();
void reset_memory_peak();
DeviceCapacity device_capacity();
// Returns freed device blocks kept for reuse to the driver (as torch.cuda.empty_cache()); bytes.
uint64_t release_cached_memory();

}  // namespace vkf::vk
