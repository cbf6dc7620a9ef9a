// The one way kernels are dispatched: a named embedded module, a push-constant struct, a grid,
// and the tensors read and written (for barrier tracking). Also the grid helpers that fold large
// 1-D launches into 2-D grids, since many devices allow only 65535 workgroups per dimension;
// shaders recover the flat index with `flat_group()` from common.glsl.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "vk/context.h"

namespace vkf {

// Fast: the drivers' built-in exp/log/rsqrt and fp32 accumulators. Precise: modules marked
// //!precise run their double-precision build (on devices with shaderFloat64), so every op rounds
// about once; the parity path uses it. Default from VKF_MATH=fast|precise (fast).
enum class MathMode { Fast, Precise };
void set_math_mode(MathMode mode);
MathMode math_mode();

// Operand precision of matrix products. F32: fp32 operands (parity, the default). F16: operands
// rounded to f16 and products accumulated in fp32 -- mixed precision, `--precision f16`: tensor
// cores through VK_NV_cooperative_matrix where the device has them, and elsewhere the fp32 tiled
// kernel rounding each staged operand to f16, so the numerics can be tested on any device.
// Tensors stay f32 in memory either way. Default from VKF_PRECISION=fp32|f16 (fp32).
enum class MatmulPrecision { F32, F16 };
void set_matmul_precision(MatmulPrecision precision);
MatmulPrecision matmul_precision();

struct Grid {
  uint32_t x = 1, y = 1, z = 1;
};

inline uint32_t div_up(int64_t n, int64_t d) { return static_cast<uint32_t>((n + d - 1) / d); }

// Enough workgroups of `local` threads to cover n items, folded so x stays within device limits.
Grid grid_1d(int64_t n, uint32_t local);

void launch_raw(const std::string& module, const std::vector<uint32_t>& spec, const void* push,
                uint32_t push_bytes, Grid grid, std::span<const Tensor* const> reads,
                std::span<const Tensor* const> writes, const vk::DispatchCost& cost = {});
inline void launch_raw(const std::string& module, const std::vector<uint32_t>& spec,
                       const void* push, uint32_t push_bytes, Grid grid,
                       std::initializer_list<const Tensor*> reads,
                       std::initializer_list<const Tensor*> writes,
                       const vk::DispatchCost& cost = {}) {
  launch_raw(module, spec, push, push_bytes, grid, std::span(reads.begin(), reads.size()),
             std::span(writes.begin(), writes.size()), cost);
}

template <typename Push>
void launch(const std::string& module, const Push& push, Grid grid,
            std::initializer_list<const Tensor*> reads, std::initializer_list<const Tensor*> writes,
            const std::vector<uint32_t>& spec = {}, const vk::DispatchCost& cost = {}) {
  static_assert(sizeof(Push) <= vk::kPushConstantBytes, "push constants exceed 128 bytes");
  launch_raw(module, spec, &push, sizeof(Push), grid, reads, writes, cost);
}

// A kernel that can be chained (vk::Stream::dispatch_chained, stage_chain_push.glsl): `push` ends
// with a vk::ChainSync at byte `sync_offset` (offsetof), which the stream fills in. While the
// stream chains stages it runs the kernel's Vulkan-memory-model build where the device has the
// model at device scope (stage_chain.glsl), unless set_vmm_chaining(false) asks for the build
// whose chained reads are coherent loads (for measuring one against the other).
void set_vmm_chaining(bool on);
bool vmm_chaining();
// Whether chained dispatches run the "_vmm" builds now (the stream chains stages, the device has
// the model at device scope, set_vmm_chaining is on): kernels whose only chainable build is a
// "_vmm" one (attention_decode_fast_chained) are chained only then.
bool chained_vmm_builds_run();
// Whether kernels must run their uniform-loop forms (every loop that touches shared memory as
// often in every invocation; the UNIFORM_LOOPS spec constants): where lavapipe (a CPU device)
// runs the "_vmm" builds, whose other loops Mesa 22.3 miscompiles.
bool vmm_builds_need_uniform_loops();
void launch_chained_raw(const std::string& module, const std::vector<uint32_t>& spec,
                        const void* push, uint32_t push_bytes, uint32_t sync_offset, Grid grid,
                        std::span<const Tensor* const> reads, std::span<const Tensor* const> writes,
                        const vk::DispatchCost& cost = {});
template <typename Push>
void launch_chained(const std::string& module, const Push& push, uint32_t sync_offset, Grid grid,
                    std::initializer_list<const Tensor*> reads,
                    std::initializer_list<const Tensor*> writes,
                    const std::vector<uint32_t>& spec = {}, const vk::DispatchCost& cost = {}) {
  static_assert(sizeof(Push) <= vk::kPushConstantBytes, "push constants exceed 128 bytes");
  launch_chained_raw(module, spec, &push, sizeof(Push), sync_offset, grid,
                     std::span(reads.begin(), reads.size()),
                     std::span(writes.begin(), writes.size()), cost);
}

// Chained kernels over more activation rows than this (a decode step's batch) launch unchained,
// with pipeline barriers: on the H200 a 1B decode step at batch 8 took 2.80-2.83 ms with barriers
// against 3.22-3.24 chained (bench/RESULTS.md, twenty-fifth session). Default 1.
void set_chain_max_rows(int64_t rows);
int64_t chain_max_rows();
// launch_chained for `rows` <= chain_max_rows(), else launch (the push's chain fields left zero:
// no wait, no count).
template <typename Push>
void launch_chained_rows(int64_t rows, const std::string& module, const Push& push,
                         uint32_t sync_offset, Grid grid,
                         std::initializer_list<const Tensor*> reads,
                         std::initializer_list<const Tensor*> writes,
                         const std::vector<uint32_t>& spec = {},
                         const vk::DispatchCost& cost = {}) {
  if (rows <= chain_max_rows())
    launch_chained(module, push, sync_offset, grid, reads, writes, spec, cost);
  else
    launch(module, push, grid, reads, writes, spec, cost);
}

// The same for kernels over a list of tensors (multi-tensor kernels), whose reads and writes are
// known only at run time. Null or undefined entries are ignored.
template <typename Push>
void launch_lists(const std::string& module, const Push& push, Grid grid,
                  const std::vector<const Tensor*>& reads, const std::vector<const Tensor*>& writes,
                  const std::vector<uint32_t>& spec = {}, const vk::DispatchCost& cost = {}) {
  static_assert(sizeof(Push) <= vk::kPushConstantBytes, "push constants exceed 128 bytes");
  launch_raw(module, spec, &push, sizeof(Push), grid, std::span(reads), std::span(writes), cost);
}

// Element counts handed to kernels are 32-bit; larger tensors are refused with a clear error.
uint32_t checked_u32(int64_t n, const char* what);

}  // namespace vkf
