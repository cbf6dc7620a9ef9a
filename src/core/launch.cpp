// Kernel dispatch through the context's stream (see launch.h).
#include "core/launch.h"

#include <algorithm>
#include <cstdlib>
#include <unordered_map>
#include <limits>

#include "vk/error.h"

namespace vkf {

Grid grid_1d(int64_t n, uint32_t local) {
  const uint64_t groups = std::max<uint64_t>(1, (static_cast<uint64_t>(n) + local - 1) / local);
  if (n == 0) return {0, 1, 1};
  constexpr uint64_t kMaxX = 65535;
  if (groups <= kMaxX) return {static_cast<uint32_t>(groups), 1, 1};
  const uint64_t y = (groups + kMaxX - 1) / kMaxX;
  return {static_cast<uint32_t>(kMaxX), static_cast<uint32_t>(y), 1};
}

uint32_t checked_u32(int64_t n, const char* what) {
  VKF_REQUIRE(n >= 0 && n <= std::numeric_limits<int32_t>::max(),
              "{} = {} exceeds the 2^31 limit of vkformer's kernels", what, n);
  return static_cast<uint32_t>(n);
}

namespace {
MathMode initial_math_mode() {
  const char* v = std::getenv("VKF_MATH");
  if (!v || !*v || std::string(v) == "fast") return MathMode::Fast;
  VKF_REQUIRE(std::string(v) == "precise", "VKF_MATH='{}': use 'fast' or 'precise'", v);
  return MathMode::Precise;
}
MathMode& mode_slot() {
  static MathMode mode = initial_math_mode();
  return mode;
}
}  // namespace

void set_math_mode(MathMode mode) { mode_slot() = mode; }
MathMode math_mode() { return mode_slot(); }

namespace {
MatmulPrecision initial_matmul_precision() {
  const char* v = std::getenv("VKF_PRECISION");
  if (!v || !*v || std::string(v) == "fp32") return MatmulPrecision::F32;
  VKF_REQUIRE(std::string(v) == "f16", "VKF_PRECISION='{}': use 'fp32' or 'f16'", v);
  return MatmulPrecision::F16;
}
MatmulPrecision& precision_slot() {
  static MatmulPrecision precision = initial_matmul_precision();
  return precision;
}
}  // namespace

void set_matmul_precision(MatmulPrecision precision) { precision_slot() = precision; }
MatmulPrecision matmul_precision() { return precision_slot(); }

// The module to run: in precise mode, its "_precise" build (double-precision exp/log/rsqrt and
// accumulators, see shaders/precise_math.glsl) where one exists and the device has fp64.
static const std::string& resolve_module(const std::string& module) {
  static std::unordered_map<std::string, std::string> precise_of;
  if (math_mode() == MathMode::Fast || !vk::Context::get().info().float64_arithmetic) return module;
  auto it = precise_of.find(module);
  if (it == precise_of.end()) {
    const std::string candidate = module + "_precise";
    it = precise_of.emplace(module, vk::Pipelines::has_module(candidate) ? candidate : module).first;
  }
  return it->second;
}

static bool g_vmm_chaining = true;  // set_vmm_chaining

void set_vmm_chaining(bool on) {
  g_vmm_chaining = on;
}
bool vmm_chaining() {
  return g_vmm_chaining;
}

static int64_t g_chain_max_rows = 1;  // set_chain_max_rows
void set_chain_max_rows(int64_t rows) {
  g_chain_max_rows = rows;
}
int64_t chain_max_rows() {
  return g_chain_max_rows;
}

bool chained_vmm_builds_run() {
  auto& ctx = vk::Context::get();
  return ctx.stream().stage_chaining() && ctx.info().memory_model_at_device_scope() &&
         g_vmm_chaining;
}

bool vmm_builds_need_uniform_loops() {
  return vk::Context::get().info().type == VK_PHYSICAL_DEVICE_TYPE_CPU && chained_vmm_builds_run();
}

// The build of a chainable kernel to run. Where the stream does not chain stages nothing waits,
// so the kernel as named (plain loads). While it chains, its "_vmm" build (the Vulkan memory model:
// the chained wait makes other stages' stores visible to plain loads, see
// shaders/stage_chain.glsl) where the device and the module have one; else its "_coherent" build,
// whose reads of other stages' outputs are coherent loads that skip the multiprocessor's cache
// where it waited. (The plain build cannot wait: stage_chain.glsl.)
static std::string chained_module(const std::string& module) {
  if (!vk::Context::get().stream().stage_chaining()) return module;
  if (chained_vmm_builds_run()) {
    const std::string vmm = module + "_vmm";
    if (vk::Pipelines::has_module(vmm)) return vmm;
  }
  const std::string coherent = module + "_coherent";
  VKF_REQUIRE(vk::Pipelines::has_module(coherent),
              "kernel {}: no build that can wait on a chained stage ({}_vmm, run where the device "
              "has the Vulkan memory model at device scope, or {}_coherent)",
              module, module, module);
  return coherent;
}

namespace {

std::vector<vk::BufferRange> ranges_of(std::span<const Tensor* const> tensors) {
  std::vector<vk::BufferRange> out;
  out.reserve(tensors.size());
  for (const Tensor* t : tensors)
    if (t && t->defined()) out.push_back(t->range());
  return out;
}

}  // namespace

void launch_raw(const std::string& module, const std::vector<uint32_t>& spec, const void* push,
                uint32_t push_bytes, Grid grid, std::span<const Tensor* const> reads,
                std::span<const Tensor* const> writes, const vk::DispatchCost& cost) {
  auto& ctx = vk::Context::get();
  const vk::Kernel& kernel = ctx.pipelines().get(resolve_module(module), spec);
  ctx.stream().dispatch(kernel, push, push_bytes, grid.x, grid.y, grid.z, ranges_of(reads),
                        ranges_of(writes), cost);
}

void launch_chained_raw(const std::string& module, const std::vector<uint32_t>& spec,
                        const void* push, uint32_t push_bytes, uint32_t sync_offset, Grid grid,
                        std::span<const Tensor* const> reads, std::span<const Tensor* const> writes,
                        const vk::DispatchCost& cost) {
  auto& ctx = vk::Context::get();
  const vk::Kernel& kernel = ctx.pipelines().get(resolve_module(chained_module(module)), spec);
  ctx.stream().dispatch_chained(kernel, push, push_bytes, sync_offset, grid.x, grid.y, grid.z,
                                ranges_of(reads), ranges_of(writes), cost);
}

}  // namespace vkf
