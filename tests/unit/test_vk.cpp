// Vulkan runtime tests: sub-allocation and reuse, out-of-memory errors, barriers only where a
// command depends on an earlier one, GPU timestamps, and that validation messages become errors.
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
