// Device memory: large VkDeviceMemory blocks, each wholly covered by one VkBuffer with a device
// address, sub-allocated first-fit. Shaders reach tensors through buffer device addresses, so a
// tensor can be larger than maxStorageBufferRange (128 MiB on lavapipe) without slicing.
// Host-visible blocks serve as staging for uploads and downloads.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

namespace vkf::vk {

struct DeviceInfo;

enum class MemoryKind { Device, Staging };

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
  // Bytes of tensors alive now, and their peak. Unlike device_bytes_in_use, which drops only once
  // the GPU has finished with freed memory, this drops when the owner lets go (track_tensor_bytes),
  // so it measures what a computation keeps alive independently of when work is submitted.
  uint64_t live_tensor_bytes = 0;
  uint64_t peak_live_tensor_bytes = 0;
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
  void reset_peak() {
    stats_.peak_device_bytes_in_use = stats_.device_bytes_in_use;
    stats_.peak_live_tensor_bytes = stats_.live_tensor_bytes;
  }
  // Called by tensor storage on creation (+bytes) and destruction (-bytes).
  void track_tensor_bytes(int64_t delta) {
    stats_.live_tensor_bytes += static_cast<uint64_t>(delta);  // wraps back for negative deltas
    if (stats_.live_tensor_bytes > stats_.peak_live_tensor_bytes)
      stats_.peak_live_tensor_bytes = stats_.live_tensor_bytes;
  }

 private:
  Block* new_block(uint64_t size, MemoryKind kind, bool dedicated);
  void destroy_block(Block* block);
  uint32_t memory_type(MemoryKind kind) const;
  uint64_t available_bytes(MemoryKind kind) const;

  VkPhysicalDevice physical_;
  VkDevice device_;
  bool memory_budget_;
  VkPhysicalDeviceMemoryProperties props_{};
  std::vector<std::unique_ptr<Block>> blocks_;
  uint32_t next_block_id_ = 1;
  MemoryStats stats_;
};

}  // namespace vkf::vk
