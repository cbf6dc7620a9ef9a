// Vulkan runtime tests: sub-allocation and reuse, out-of-memory errors, the memory accounting
// (live/held/peak bytes, capacity), barriers only where a command depends on an earlier one, GPU
// timestamps, and that validation messages become errors.
#include <string>

#include "core/tensor_kernels.h"
#include "test_util.h"
#include "vk/context.h"
#include "vk/error.h"

namespace vkf {
namespace {

TEST(Vk, SubAllocatesAndReuses) {
  auto& alloc = vk::Context::get().allocator();
  vk::stream().synchronize();
  const uint64_t before = alloc.stats().device_bytes_in_use;
  {
    std::vector<Tensor> ts;
    for (int i = 0; i < 200; ++i) ts.push_back(Tensor::zeros({1 + i % 17, 33}));
    EXPECT_GT(alloc.stats().device_bytes_in_use, before);
    // Many small tensors share blocks: reserved memory stays one block's worth.
    EXPECT_LE(alloc.stats().device_bytes_reserved, 512ull << 20);
    // Distinct tensors never overlap.
    for (size_t i = 1; i < ts.size(); ++i) {
      EXPECT_FALSE(ts[i].range().overlaps(ts[i - 1].range()));
    }
  }
  vk::stream().synchronize();  // frees are deferred until the GPU is done
  EXPECT_EQ(alloc.stats().device_bytes_in_use, before);
}

TEST(Vk, OutOfMemoryIsAClearError) {
  test::expect_error([&] { Tensor t = Tensor::empty({1ll << 40}); },
                     {"out of device memory", "asked for", "MiB available"});
}

TEST(Vk, AccountsLiveHeldAndPeakBytes) {
  vk::stream().synchronize();
  vk::reset_memory_peak();
  const vk::DeviceMemoryStats s0 = vk::memory_stats();
  EXPECT_EQ(s0.peak_live_bytes, s0.live_bytes);
  EXPECT_LE(s0.live_bytes, s0.held_bytes);
  {
    // 1000 floats round up to the 256-byte allocation granularity: 4096 bytes.
    Tensor a = Tensor::zeros({1000});
    Tensor b = Tensor::zeros({10, 10});  // 400 bytes -> 512
    const vk::DeviceMemoryStats s1 = vk::memory_stats();
    EXPECT_EQ(s1.live_bytes, s0.live_bytes + 4096 + 512);
    EXPECT_EQ(s1.held_bytes, s0.held_bytes + 4096 + 512);
    EXPECT_EQ(s1.peak_live_bytes, s1.live_bytes);
    EXPECT_GE(s1.reserved_bytes, s1.held_bytes);
  }
  // Released tensors stop being live at once; the fill commands that use them may still be
  // queued, so their memory is held until the stream has waited for them.
  const vk::DeviceMemoryStats s2 = vk::memory_stats();
  EXPECT_EQ(s2.live_bytes, s0.live_bytes);
  EXPECT_EQ(s2.peak_live_bytes, s0.live_bytes + 4096 + 512);
  vk::stream().synchronize();
  EXPECT_EQ(vk::memory_stats().held_bytes, s0.held_bytes);
  vk::reset_memory_peak();
  EXPECT_EQ(vk::memory_stats().peak_live_bytes, s0.live_bytes);
  // A tensor too large to share a block gets its own, which counts as reserved while it lives
  // and, once freed, is kept for the next large tensor it fits until the cache is released.
  vk::release_cached_memory();
  const uint64_t reserved0 = vk::memory_stats().reserved_bytes;
  uint64_t big_address = 0;
  {
    Tensor big = Tensor::empty({(100ll << 20) / 4});
    big_address = big.address();
    EXPECT_GE(vk::memory_stats().peak_reserved_bytes, reserved0 + (100ull << 20));
  }
  vk::stream().synchronize();
  EXPECT_EQ(vk::memory_stats().reserved_bytes, reserved0 + (100ull << 20));
  EXPECT_EQ(vk::memory_stats().cached_bytes, 100ull << 20);
  {
    // 95 MiB fits the kept 100 MiB block within the reuse slack: same memory, nothing new.
    Tensor again = Tensor::empty({(95ll << 20) / 4});
    EXPECT_EQ(again.address(), big_address);
    EXPECT_EQ(vk::memory_stats().reserved_bytes, reserved0 + (100ull << 20));
    EXPECT_EQ(vk::memory_stats().cached_bytes, 0u);
    // 70 MiB would waste more than an eighth of a kept 100 MiB block: it gets its own.
  }
  vk::stream().synchronize();
  {
    Tensor smaller = Tensor::empty({(70ll << 20) / 4});
    EXPECT_NE(smaller.address(), big_address);
    EXPECT_EQ(vk::memory_stats().reserved_bytes, reserved0 + (170ull << 20));
  }
  EXPECT_EQ(vk::release_cached_memory(), 170ull << 20);
  EXPECT_EQ(vk::memory_stats().reserved_bytes, reserved0);
  EXPECT_EQ(vk::memory_stats().cached_bytes, 0u);
}

TEST(Vk, ReportsDeviceCapacity) {
  const vk::DeviceCapacity c = vk::device_capacity();
  EXPECT_GT(c.heap_bytes, 0u);
  const vk::DeviceInfo& info = vk::Context::get().info();
  // Tensors come from one device-local heap (a GPU may have a second, small one: resizable BAR).
  if (info.device_local_bytes() > 0) {
    EXPECT_LE(c.heap_bytes, info.device_local_bytes());
  }
  if (!info.memory_budget) {
    EXPECT_FALSE(c.budget_bytes.has_value());
  }
  if (c.budget_bytes) {
    EXPECT_GT(*c.budget_bytes, 0u);
    EXPECT_LE(c.total(), c.heap_bytes);
  } else {
    EXPECT_EQ(c.total(), c.heap_bytes);
  }
}

TEST(Vk, BarriersOnlyForDependencies) {
  Tensor a = Tensor::full({1000}, 1.0f), b = Tensor::full({1000}, 2.0f);
  Tensor c = Tensor::empty({1000}), d = Tensor::empty({1000}), e = Tensor::empty({1000});
  auto& s = vk::stream();
  detail::axpy(a, b, 1.0f, c);  // needs a barrier after the fills
  const uint64_t b0 = s.barrier_count();
  detail::axpy(b, a, 1.0f, d);  // independent of the first: no barrier
  EXPECT_EQ(s.barrier_count(), b0);
  detail::axpy(c, d, 1.0f, e);  // reads what both wrote: one barrier
  EXPECT_EQ(s.barrier_count(), b0 + 1);
  detail::axpy(a, b, 1.0f, c);  // overwrites c that the last one read: a barrier (write after read)
  EXPECT_EQ(s.barrier_count(), b0 + 2);
  for (double x : e.to_double()) EXPECT_EQ(x, 6.0);
}

TEST(Vk, TimestampsProfileKernels) {
  auto& s = vk::stream();
  s.set_profiling(true);
  Tensor a = Tensor::full({1 << 16}, 1.0f);
  Tensor b = Tensor::full({1 << 16}, 1.0f);
  for (int i = 0; i < 5; ++i) detail::axpy(a, b, 0.5f, a);
  const auto prof = s.profile();
  s.set_profiling(false);
  bool found = false;
  for (const auto& p : prof) {
    if (p.label != "axpy") continue;
    found = true;
    EXPECT_EQ(p.calls, 5u);
    EXPECT_GT(p.total_ms, 0.0);
    EXPECT_GT(p.flops, 0.0);
  }
  EXPECT_TRUE(found);
  for (double x : a.to_double()) ASSERT_EQ(x, 3.5);
}

TEST(Vk, ValidationMessagesBecomeErrors) {
  auto& ctx = vk::Context::get();
  if (!ctx.validation_enabled()) GTEST_SKIP() << "run with VKF_VALIDATE=1 (make test does)";
  // A deliberately invalid call: a buffer of size 0 violates VUID-VkBufferCreateInfo-size-00912.
  VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bci.size = 0;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
  VkBuffer buffer = VK_NULL_HANDLE;
  if (vkCreateBuffer(ctx.device(), &bci, nullptr, &buffer) == VK_SUCCESS && buffer) {
    vkDestroyBuffer(ctx.device(), buffer, nullptr);
  }
  try {
    vk::stream().synchronize();
    FAIL() << "the validation layer's message did not become an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("validation"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vkf
