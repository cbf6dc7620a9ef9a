// Block sub-allocator for device and staging memory (see memory.h).
#include "vk/memory.h"

#include <algorithm>

#include "vk/context.h"
#include "vk/device_info.h"
#include "vk/error.h"
#include "vk/stream.h"

namespace vkf::vk {
namespace {
constexpr uint64_t kStagingBlock = 64ull << 20;
uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
double mib(uint64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }
}  // namespace

Allocator::Allocator(VkPhysicalDevice physical, VkDevice device, const DeviceInfo& info)
    : physical_(physical), device_(device), memory_budget_(info.memory_budget) {
  vkGetPhysicalDeviceMemoryProperties(physical_, &props_);
}

Allocator::~Allocator() {
  for (auto& b : blocks_) destroy_block(b.get());
}

uint32_t Allocator::memory_type(MemoryKind kind) const {
  // Staging prefers cached host memory (fast reads back); device memory prefers device-local.
  auto want = kind == MemoryKind::Device
                  ? std::vector<VkMemoryPropertyFlags>{VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0}
                  : std::vector<VkMemoryPropertyFlags>{
                        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT |
                            VK_MEMORY_PROPERTY_HOST_CACHED_BIT,
                        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT};
  for (auto flags : want)
    for (uint32_t i = 0; i < props_.memoryTypeCount; ++i)
      if ((props_.memoryTypes[i].propertyFlags & flags) == flags) return i;
  fail("no Vulkan memory type for {} memory on this device",
       kind == MemoryKind::Device ? "device" : "host-visible staging");
}

// VK_EXT_memory_budget's figures for every heap (only called when the extension is enabled).
VkPhysicalDeviceMemoryBudgetPropertiesEXT Allocator::query_budget() const {
  VkPhysicalDeviceMemoryBudgetPropertiesEXT budget{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
  VkPhysicalDeviceMemoryProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2};
  p2.pNext = &budget;
  vkGetPhysicalDeviceMemoryProperties2(physical_, &p2);
  return budget;
}

uint64_t Allocator::available_bytes(MemoryKind kind) const {
  const uint32_t heap = props_.memoryTypes[memory_type(kind)].heapIndex;
  if (memory_budget_) {
    const VkPhysicalDeviceMemoryBudgetPropertiesEXT budget = query_budget();
    const uint64_t b = budget.heapBudget[heap], u = budget.heapUsage[heap];
    return b > u ? b - u : 0;
  }
  return props_.memoryHeaps[heap].size;
}

Block* Allocator::new_block(uint64_t size, MemoryKind kind, bool dedicated) {
  const uint64_t heap_size = props_.memoryHeaps[props_.memoryTypes[memory_type(kind)].heapIndex].size;
  if (size > heap_size) {
    fail("out of {} memory: asked for {:.1f} MiB, but the whole memory heap is {:.1f} MiB "
         "({:.1f} MiB available); use a smaller model, batch or sequence length",
         kind == MemoryKind::Device ? "device" : "host-visible", mib(size), mib(heap_size),
         mib(available_bytes(kind)));
  }
  auto block = std::make_unique<Block>();
  block->id = next_block_id_++;
  block->size = size;
  block->kind = kind;
  block->dedicated = dedicated;

  VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bci.size = size;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
              VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VkResult r = vkCreateBuffer(device_, &bci, nullptr, &block->buffer);
  if (r != VK_SUCCESS) {
    fail("cannot create a Vulkan buffer of {:.1f} MiB ({}); the device may limit buffer size",
         mib(size), result_name(r));
  }
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(device_, block->buffer, &req);
  VkMemoryAllocateFlagsInfo flags{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO};
  flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
  VkMemoryAllocateInfo mai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  mai.pNext = &flags;
  mai.allocationSize = req.size;
  mai.memoryTypeIndex = memory_type(kind);
  r = vkAllocateMemory(device_, &mai, nullptr, &block->memory);
  if (r != VK_SUCCESS) {
    vkDestroyBuffer(device_, block->buffer, nullptr);
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY) {
      throw OutOfMemory(fmt::format(
          "out of {} memory: asked for {:.1f} MiB, about {:.1f} MiB available ({:.1f} MiB already in "
          "use by vkformer); use a smaller model, batch or sequence length",
          kind == MemoryKind::Device ? "device" : "host-visible", mib(req.size), mib(available_bytes(kind)),
          mib(stats_.device_bytes_reserved)));
    }
    throw_vk_error(r, "vkAllocateMemory", __FILE__, __LINE__);
  }
  VKF_VK_CHECK(vkBindBufferMemory(device_, block->buffer, block->memory, 0));
  VkBufferDeviceAddressInfo bdai{VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO};
  bdai.buffer = block->buffer;
  block->address = vkGetBufferDeviceAddress(device_, &bdai);
  if (props_.memoryTypes[mai.memoryTypeIndex].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT &&
      kind == MemoryKind::Staging) {
    VKF_VK_CHECK(vkMapMemory(device_, block->memory, 0, VK_WHOLE_SIZE, 0, &block->mapped));
  }
  block->free_ranges[0] = size;
  if (kind == MemoryKind::Device) {
    stats_.device_bytes_reserved += size;
    account(0, 0, static_cast<int64_t>(size));
  }
  blocks_.push_back(std::move(block));
  return blocks_.back().get();
}

void Allocator::destroy_block(Block* block) {
  if (block->mapped) vkUnmapMemory(device_, block->memory);
  vkDestroyBuffer(device_, block->buffer, nullptr);
  vkFreeMemory(device_, block->memory, nullptr);
}

void Allocator::drop_block(Block* block) {
  if (block->kind == MemoryKind::Device) {
    stats_.device_bytes_reserved -= block->size;
    account(0, 0, -static_cast<int64_t>(block->size));
  }
  destroy_block(block);
  blocks_.erase(std::find_if(blocks_.begin(), blocks_.end(),
                             [block](const auto& p) { return p.get() == block; }));
}

Block* Allocator::new_block_reclaiming(uint64_t size, MemoryKind kind, bool dedicated) {
  // Kept blocks go back before the heap would run over (a driver may oversubscribe device memory
  // instead of failing); the failure below still catches what this estimate misses.
  if (kind == MemoryKind::Device && !cached_dedicated_.empty()) {
    const uint64_t heap = props_.memoryHeaps[props_.memoryTypes[memory_type(kind)].heapIndex].size;
    const uint64_t left = memory_budget_ ? available_bytes(kind)
                                         : heap - std::min(heap, stats_.device_bytes_reserved);
    if (size > left) release_cached();
  }
  try {
    return new_block(size, kind, dedicated);
  } catch (const OutOfMemory&) {
    if (kind != MemoryKind::Device || release_cached() == 0) throw;
    return new_block(size, kind, dedicated);
  }
}

// The smallest kept block of at least `size` bytes, unless even that one would waste more than
// 1/kReuseSlackDivisor of itself (then a block of the exact size is the better use of memory).
Block* Allocator::reuse_cached(uint64_t size) {
  auto it = cached_dedicated_.lower_bound(size);
  if (it == cached_dedicated_.end() || it->first - size > it->first / kReuseSlackDivisor) return nullptr;
  Block* block = it->second;
  cached_dedicated_.erase(it);
  accounting_.cached_bytes -= block->size;
  block->free_ranges.clear();
  block->free_ranges[0] = block->size;
  return block;
}

uint64_t Allocator::release_cached() {
  if (cached_dedicated_.empty() || hold_cached_) return 0;
  // Freed device memory is reusable at once (Stream::release), so commands recorded or in flight
  // may still reference a kept block: let them finish before the block goes.
  Context::get().stream().synchronize();
  uint64_t released = 0;
  for (auto& [size, block] : cached_dedicated_) {
    released += size;
    drop_block(block);
  }
  cached_dedicated_.clear();
  accounting_.cached_bytes = 0;
  return released;
}

Allocation Allocator::allocate(uint64_t bytes, MemoryKind kind) {
  const uint64_t size = align_up(std::max<uint64_t>(bytes, 1), kAllocationAlignment);
  const uint64_t block_size = kind == MemoryKind::Device ? kDeviceBlockBytes : kStagingBlock;
  Block* chosen = nullptr;
  uint64_t offset = 0;
  if (size <= block_size / 4) {
    for (auto& b : blocks_) {
      if (b->kind != kind || b->dedicated) continue;
      for (auto& [off, sz] : b->free_ranges) {
        if (sz >= size) {
          chosen = b.get();
          offset = off;
          break;
        }
      }
      if (chosen) break;
    }
    if (!chosen) {
      chosen = new_block_reclaiming(block_size, kind, false);
      offset = 0;
    }
  } else {
    // Large tensors get a block of their own (device ones kept for reuse when freed).
    if (kind == MemoryKind::Device) chosen = reuse_cached(size);
    if (!chosen) chosen = new_block_reclaiming(size, kind, true);
    offset = 0;
  }
  auto it = chosen->free_ranges.find(offset);
  const uint64_t range = it->second;
  chosen->free_ranges.erase(it);
  if (range > size) chosen->free_ranges[offset + size] = range - size;
  chosen->used += size;
  if (kind == MemoryKind::Device) count_in_use(size, true);
  return Allocation{chosen, offset, size};
}

void Allocator::count_in_use(uint64_t size, bool live) {
  stats_.device_bytes_in_use += size;
  stats_.peak_device_bytes_in_use =
      std::max(stats_.peak_device_bytes_in_use, stats_.device_bytes_in_use);
  account(live ? static_cast<int64_t>(size) : 0, static_cast<int64_t>(size), 0);
}

std::vector<Allocation> Allocator::claim_free(uint32_t block_id, uint64_t offset, uint64_t size) {
  std::vector<Allocation> claimed;
  auto found = std::find_if(blocks_.begin(), blocks_.end(),
                            [&](const auto& b) { return b->id == block_id; });
  if (found == blocks_.end() || (*found)->kind != MemoryKind::Device) return claimed;
  Block* b = found->get();
  if (b->dedicated) {
    // Free only while kept for reuse; then the whole block is one allocation.
    for (auto it = cached_dedicated_.begin(); it != cached_dedicated_.end(); ++it) {
      if (it->second != b) continue;
      cached_dedicated_.erase(it);
      accounting_.cached_bytes -= b->size;
      b->free_ranges.clear();
      b->used = b->size;
      count_in_use(b->size, false);
      claimed.push_back(Allocation{b, 0, b->size});
      break;
    }
    return claimed;
  }
  const uint64_t end = offset + size;
  // The free range that starts at or before `offset` may reach into it; later ones start inside.
  auto it = b->free_ranges.upper_bound(offset);
  if (it != b->free_ranges.begin()) --it;
  while (it != b->free_ranges.end() && it->first < end) {
    const uint64_t free_start = it->first, free_end = it->first + it->second;
    if (free_end <= offset) {
      ++it;
      continue;
    }
    const uint64_t start = std::max(free_start, offset), stop = std::min(free_end, end);
    it = b->free_ranges.erase(it);
    if (free_start < start) b->free_ranges[free_start] = start - free_start;
    if (stop < free_end) it = b->free_ranges.emplace(stop, free_end - stop).first;
    b->used += stop - start;
    count_in_use(stop - start, false);
    claimed.push_back(Allocation{b, start, stop - start});
  }
  return claimed;
}

void Allocator::free(const Allocation& a) {
  Block* b = a.block;
  if (!b) return;
  b->used -= a.size;
  if (b->kind == MemoryKind::Device) {
    stats_.device_bytes_in_use -= a.size;
    account(0, -static_cast<int64_t>(a.size), 0);
  }
  if (b->dedicated && b->kind == MemoryKind::Device) {
    cached_dedicated_.emplace(b->size, b);  // still reserved; see reuse_cached()
    accounting_.cached_bytes += b->size;
    return;
  }
  if (b->dedicated) {
    drop_block(b);
    return;
  }
  // Insert and merge with neighbours.
  auto [it, inserted] = b->free_ranges.emplace(a.offset, a.size);
  if (std::next(it) != b->free_ranges.end() && it->first + it->second == std::next(it)->first) {
    it->second += std::next(it)->second;
    b->free_ranges.erase(std::next(it));
  }
  if (it != b->free_ranges.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      b->free_ranges.erase(it);
    }
  }
}

void Allocator::account(int64_t live, int64_t held, int64_t reserved) {
  auto apply = [](uint64_t& value, uint64_t& peak, int64_t delta) {
    value = static_cast<uint64_t>(static_cast<int64_t>(value) + delta);
    peak = std::max(peak, value);
  };
  apply(accounting_.live_bytes, accounting_.peak_live_bytes, live);
  apply(accounting_.held_bytes, accounting_.peak_held_bytes, held);
  apply(accounting_.reserved_bytes, accounting_.peak_reserved_bytes, reserved);
}

void Allocator::released(const Allocation& a) {
  if (a.block && a.block->kind == MemoryKind::Device) account(-static_cast<int64_t>(a.size), 0, 0);
}

void Allocator::reset_device_peaks() {
  accounting_.peak_live_bytes = accounting_.live_bytes;
  accounting_.peak_held_bytes = accounting_.held_bytes;
  accounting_.peak_reserved_bytes = accounting_.reserved_bytes;
}

DeviceCapacity Allocator::capacity() const {
  const uint32_t heap = props_.memoryTypes[memory_type(MemoryKind::Device)].heapIndex;
  DeviceCapacity c;
  c.heap_bytes = props_.memoryHeaps[heap].size;
  if (memory_budget_) {
    const VkPhysicalDeviceMemoryBudgetPropertiesEXT budget = query_budget();
    // A driver may leave the budget at 0 for a heap it does not track; then only the size counts.
    if (budget.heapBudget[heap] > 0) {
      c.budget_bytes = budget.heapBudget[heap];
      c.usage_bytes = budget.heapUsage[heap];
    }
  }
  return c;
}

DeviceMemoryStats memory_stats() {
  return Context::get().allocator().device_stats();
}

void reset_memory_peak() {
  Context::get().allocator().reset_device_peaks();
}

DeviceCapacity device_capacity() {
  return Context::get().allocator().capacity();
}

uint64_t release_cached_memory() {
  return Context::get().allocator().release_cached();
}

}  // namespace vkf::vk
