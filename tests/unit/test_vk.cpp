// Vulkan runtime tests: sub-allocation and reuse, out-of-memory errors, the memory accounting
// (live/held/peak bytes, capacity), barriers only where a command depends on an earlier one, GPU
// timestamps, and that validation messages become errors.
#include <string>
#include <vector>

#include "core/launch.h"
#include "core/tensor_kernels.h"
#include "ops/elementwise.h"
#include "test_util.h"
#include "vk/context.h"
#include "vk/error.h"
#include "vk/pipeline.h"
#include "vk/spirv_builder.h"

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

// Freed device memory is reused at once, while commands that read it may still be queued: the
// stream must order the next user's writes after those reads (Stream::release, hazard()).
TEST(Vk, ReusesFreedMemoryBehindQueuedReads) {
  vk::stream().synchronize();
  constexpr int64_t n = 1 << 16;
  Tensor doubled;
  uint64_t freed_address = 0;
  {
    Tensor source = Tensor::full({n}, 3.0f);
    freed_address = source.address();
    doubled = ops::add(source, source);  // queued: reads `source`
  }
  Tensor reuse = Tensor::full({n}, -7.0f);  // same size: takes the freed range at once
  EXPECT_EQ(reuse.address(), freed_address);
  const std::vector<float> d = doubled.to_float(), r = reuse.to_float();
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(d[i], 6.0f) << "at " << i;
    ASSERT_EQ(r[i], -7.0f) << "at " << i;
  }
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
  // Released tensors stop being live at once, and their device memory is free at once too: the
  // fill commands that use them may still be queued, but the stream orders any later command
  // on the same memory after them.
  const vk::DeviceMemoryStats s2 = vk::memory_stats();
  EXPECT_EQ(s2.live_bytes, s0.live_bytes);
  EXPECT_EQ(s2.peak_live_bytes, s0.live_bytes + 4096 + 512);
  EXPECT_EQ(s2.held_bytes, s0.held_bytes);
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

// A kernel written with vk::SpirvBuilder and registered at run time (the route of the
// workgroup-scope GEMM, which needs a GPU): y[i] = x[i] + push.add for i = the workgroup's index,
// through 64-bit buffer addresses in push constants. Exercises the module layout, string and
// constant encoding, decorations, the entry point interface and the generated-module registry.
TEST(Vk, GeneratedSpirvModuleRuns) {
  using namespace vk::spv;
  vk::SpirvBuilder b;
  for (uint32_t cap : {CapShader, CapInt64, CapPhysicalStorageBufferAddresses}) b.capability(cap);
  b.memory_model(kAddressingPhysicalStorageBuffer64, kMemoryModelGLSL450);
  const uint32_t t_void = b.type(OpTypeVoid), u32 = b.type(OpTypeInt, {32, 0});
  const uint32_t u64 = b.type(OpTypeInt, {64, 0}), f32 = b.type(OpTypeFloat, {32});
  const uint32_t v3u = b.type(OpTypeVector, {u32, 3});
  const uint32_t t_push = b.type(OpTypeStruct, {u64, u64, f32});
  const uint32_t p_push = b.type(OpTypePointer, {PushConstant, t_push});
  const uint32_t p_push_u64 = b.type(OpTypePointer, {PushConstant, u64});
  const uint32_t p_push_f32 = b.type(OpTypePointer, {PushConstant, f32});
  const uint32_t p_in = b.type(OpTypePointer, {Input, v3u});
  const uint32_t p_f32 = b.type(OpTypePointer, {PhysicalStorageBuffer, f32});
  const uint32_t t_fn = b.type(OpTypeFunction, {t_void});
  const uint32_t v_push = b.global_variable(p_push, PushConstant);
  const uint32_t v_id = b.global_variable(p_in, Input);
  b.decorate(t_push, Block);
  for (uint32_t i = 0; i < 3; ++i) b.member_decorate(t_push, i, Offset, {8 * i});
  b.decorate(v_id, BuiltIn, {WorkgroupId});
  const uint32_t f_main = b.fresh_id();
  b.entry_point(kExecutionModelGLCompute, f_main, "main", {v_push, v_id});
  b.execution_mode(f_main, kExecutionModeLocalSize, {1, 1, 1});
  b.op_with_id(OpFunction, t_void, f_main, {0, t_fn});
  b.op_with_id(OpLabel, 0, b.fresh_id(), {});
  auto member = [&](uint32_t index, uint32_t type, uint32_t ptr_type) {
    return b.op(OpLoad, type, {b.op(OpAccessChain, ptr_type, {v_push, b.constant_u32(index)})});
  };
  const uint32_t i = b.op(OpCompositeExtract, u32, {b.op(OpLoad, v3u, {v_id}), 0});
  const uint32_t offset =
      b.op(OpIMul, u64, {b.op(OpUConvert, u64, {i}), b.constant_u64(4)});
  auto element = [&](uint32_t base) {
    return b.op(OpConvertUToPtr, p_f32, {b.op(OpIAdd, u64, {base, offset})});
  };
  const uint32_t x = b.op(OpLoad, f32, {element(member(0, u64, p_push_u64)),
                                        kMemoryAccessAligned, 4});
  const uint32_t sum = b.op(OpFAdd, f32, {x, member(2, f32, p_push_f32)});
  b.op_void(OpStore, {element(member(1, u64, p_push_u64)), sum, kMemoryAccessAligned, 4});
  b.op_void(OpReturn, {});
  b.op_void(OpFunctionEnd, {});
  vk::Pipelines::register_generated("test_generated_add", b.finish());
  ASSERT_TRUE(vk::Pipelines::has_module("test_generated_add"));

  const std::vector<float> xs = {1.5f, -2.0f, 0.25f, 1e6f, -0.0f, 3.0f, 7.0f};
  const Tensor x_t = Tensor::from_host(std::span<const float>(xs), {7});
  Tensor y_t = Tensor::zeros({7});
  struct Push {
    uint64_t x, y;
    float add;
  } push{x_t.address(), y_t.address(), 0.5f};
  launch_raw("test_generated_add", {}, &push, sizeof(push), Grid{7, 1, 1}, {&x_t}, {&y_t});
  const auto ys = y_t.to_double();
  for (size_t k = 0; k < xs.size(); ++k) EXPECT_EQ(ys[k], static_cast<double>(xs[k] + 0.5f)) << k;
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
