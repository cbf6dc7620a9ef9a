// Support detection, tile variants and choice for the cooperative-matrix GEMM (see
// matmul_coopmat.h). Everything the shader's shared-memory layout implies is recomputed here so
// that a variant the device cannot hold is refused with a reason instead of failing at pipeline
// creation.
#include "ops/matmul_coopmat.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/launch.h"
#include "ops/matmul_workgroup.h"
#include "vk/context.h"
#include "vk/error.h"
#include "vk/pipeline.h"

namespace vkf::ops::detail {
namespace {

constexpr uint32_t kSubgroup = 32;  // the shader's subgroup size
constexpr uint32_t kPad = 8;        // halves of padding per staged line (matmul_coopmat's PAD)

std::string g_choice = "auto";
F16Convert g_convert = F16Convert::Auto;
bool g_emulate = false;
bool g_f16_operands = true;

// Bytes of shared memory the shader declares for a tile, for the worst transpose combination:
// two staging buffers of f16 slices, aliased with the epilogue's f32 scratch.
uint32_t shared_bytes(const CoopmatTile& t, uint32_t mma_m) {
  const uint32_t a = std::max(t.bm * (t.bk + kPad), t.bk * (t.bm + kPad));
  const uint32_t b = std::max(t.bn * (t.bk + kPad), t.bk * (t.bn + kPad));
  const uint32_t staging = 2 * (a + b) * 2;
  const uint32_t scratch = t.subgroups() * mma_m * (t.wn + 4) * 4;
  return std::max(staging, scratch);
}

const CoopmatTile* find_tile(const std::string& name) {
  for (const auto& t : coopmat_tiles())
    if (t.name() == name) return &t;
  return nullptr;
}

std::string tile_names() {
  std::string all;
  for (const auto& t : coopmat_tiles()) all += (all.empty() ? "" : ", ") + t.name();
  return all;
}

}  // namespace

std::string CoopmatTile::name() const {
  return fmt::format("{}x{}x{}/{}x{}", bm, bn, bk, wm, wn);
}

const std::vector<CoopmatTile>& coopmat_tiles() {
  // 64x64 for devices with little shared memory; 128x128 with 8 subgroups of 64x32, 16 or 32
  // deep, or with 4 subgroups of 64x64; the 128x256 / 256x128 tiles halve the operand traffic per
  // flop again (BK 16 keeps their two staging buffers within 48 KiB). 128x128x16/64x32 comes
  // second: it is auto's choice wherever it fits (see coopmat_plan).
  static const std::vector<CoopmatTile> tiles = {
      {64, 64, 32, 32, 32},   {128, 128, 16, 64, 32}, {128, 128, 32, 64, 32},
      {128, 128, 16, 64, 64}, {128, 256, 16, 64, 64}, {256, 128, 16, 64, 64},
  };
  return tiles;
}

CoopmatSupport coopmat_support() {
  CoopmatSupport s;
  const auto& info = vk::Context::get().info();
  if (g_emulate) {
    if (!vk::Pipelines::has_module("matmul_coopmat_emulated"))
      s.unsupported = "this build has no matmul_coopmat_emulated module";
    s.mma_m = s.mma_n = s.mma_k = 16;
    return s;
  }
  if (!vk::Pipelines::has_module("matmul_coopmat")) {
    s.unsupported =
        "this build has no matmul_coopmat module (glslc lacked GL_NV_cooperative_matrix)";
  } else if (!info.coopmat_nv) {
    s.unsupported = "the device has no VK_NV_cooperative_matrix";
  } else if (!info.float16_arithmetic) {
    s.unsupported = "the device has no shaderFloat16";
  } else if (!info.vulkan_memory_model) {
    s.unsupported = "the device has no vulkanMemoryModel";
  } else if (info.subgroup_size != kSubgroup) {
    s.unsupported = fmt::format("subgroup size {} (the kernel is written for {})",
                                info.subgroup_size, kSubgroup);
  }
  if (!s.unsupported.empty()) return s;
  // f16 A and B, f32 C and result, on subgroups; the kernel's shared-memory offsets need every
  // dimension to be a multiple of 8. Prefer the largest fragments (fewest instructions).
  const vk::CoopMatShape* best = nullptr;
  for (const auto& shape : info.coopmat_nv_shapes) {
    if (shape.a_type != "f16" || shape.b_type != "f16" || shape.c_type != "f32" ||
        shape.result_type != "f32" || shape.scope != "subgroup")
      continue;
    if (shape.m % 8 || shape.n % 8 || shape.k % 8 || shape.m > 32 || shape.n > 32 || shape.k > 32)
      continue;
    if (!best || shape.m * shape.n * shape.k > best->m * best->n * best->k) best = &shape;
  }
  if (!best) {
    s.unsupported = "the device lists no f16 x f16 + f32 subgroup fragment shape";
    return s;
  }
  s.mma_m = best->m;
  s.mma_n = best->n;
  s.mma_k = best->k;
  s.hardware_convert = info.f16_rounding_rte && info.f16_denorm_preserve &&
                       vk::Pipelines::has_module("matmul_coopmat_hwcvt");
  return s;
}

std::string coopmat_tile_unfit(const CoopmatTile& t, const CoopmatSupport& s) {
  const auto& info = vk::Context::get().info();
  if (!s.unsupported.empty()) return s.unsupported;
  if (t.wm % s.mma_m || t.wn % s.mma_n || t.bk % s.mma_k)
    return fmt::format("tile {} is not a multiple of the {}x{}x{} fragments", t.name(), s.mma_m,
                       s.mma_n, s.mma_k);
  const uint32_t local = t.subgroups() * kSubgroup;
  // The shader stages 8-element chunks, the same number per invocation.
  if (t.bm % t.wm || t.bn % t.wn || (t.bm * t.bk / 8) % local || (t.bn * t.bk / 8) % local)
    return fmt::format("tile {} does not divide into its subgroups' blocks and chunks", t.name());
  if (local > info.max_workgroup_invocations)
    return fmt::format("tile {} needs {} invocations per workgroup, the device allows {}", t.name(),
                       local, info.max_workgroup_invocations);
  const uint32_t bytes = shared_bytes(t, s.mma_m);
  if (bytes > info.max_shared_memory)
    return fmt::format("tile {} needs {} bytes of shared memory, the device allows {}", t.name(),
                       bytes, info.max_shared_memory);
  return "";
}

void set_coopmat_choice(const std::string& choice) {
  VKF_REQUIRE(choice == "auto" || choice == "off" || find_tile(choice) ||
                  find_workgroup_tile(choice),
              "cooperative-matrix tile '{}': use auto, off or one of {}, {}", choice, tile_names(),
              workgroup_tile_names());
  g_choice = choice;
}
std::string coopmat_choice() {
  return g_choice;
}

void set_f16_convert(F16Convert convert) {
  g_convert = convert;
}
void set_coopmat_emulation(bool on) {
  g_emulate = on;
}
bool coopmat_emulation() {
  return g_emulate;
}
void set_coopmat_f16_operands(bool on) {
  g_f16_operands = on;
}
bool coopmat_f16_operands() {
  return g_f16_operands;
}
F16Convert f16_convert() {
  return g_convert;
}

std::string coopmat_module() {
  if (g_emulate) return "matmul_coopmat_emulated";
  // The hwcvt module declares RTE and kept subnormals for f16: valid only where the device has
  // both.
  const bool hw = g_convert != F16Convert::Exact && coopmat_support().hardware_convert;
  return hw ? "matmul_coopmat_hwcvt" : "matmul_coopmat";
}
std::string f16_convert_name() {
  const std::string module = coopmat_module();
  return module == "matmul_coopmat_hwcvt" ? "hw"
         : module == "matmul_coopmat"     ? "exact"
                                          : "emulated";
}

std::optional<CoopmatTile> coopmat_plan(int64_t /*batch*/, int64_t /*m*/, int64_t /*n*/) {
  if (matmul_precision() != MatmulPrecision::F16 || g_choice == "off") return std::nullopt;
  const CoopmatSupport s = coopmat_support();
  if (!s.unsupported.empty()) return std::nullopt;
  // A forced workgroup-scope tile (matmul_workgroup.h) leaves this kernel auto's choice for the
  // products that one does not take.
  if (const CoopmatTile* forced = find_tile(g_choice)) {
    if (coopmat_tile_unfit(*forced, s).empty()) return *forced;
    return std::nullopt;
  }
  // Auto: 128x128x16 with 8 subgroups of 64x32 wherever it fits the device, else 64x64 (split-K,
  // chosen after the tile, gives products with few output tiles their workgroups). Measured on
  // the H200 by forcing each tile for every product of a training step (bench/RESULTS.md):
  // 128x128x16/64x32 gave the fastest step on both model shapes (1B: 580 ms against 630 for
  // 128x128x32/64x32, whose 153 registers per invocation leave room for one workgroup per
  // multiprocessor where this tile's 126 fit two), ahead of the larger 128x256 / 256x128 tiles, of
  // 128x128x16/64x64 and of single-buffered 64-deep slices; and it beat 64x64 on the products of
  // few tiles too (1B: 605 ms with 64x64 below 128 workgroups, 580 without).
  const auto& tiles = coopmat_tiles();
  const CoopmatTile &small = tiles[0], &medium = tiles[1];
  if (coopmat_tile_unfit(medium, s).empty()) return medium;
  if (coopmat_tile_unfit(small, s).empty()) return small;
  return std::nullopt;
}

std::vector<uint32_t> coopmat_spec(const CoopmatTile& t, const CoopmatSupport& s, bool trans_a,
                                   bool trans_b, bool vec_a, bool vec_b, bool f16_a, bool f16_b) {
  // Mirrors the constant_ids of matmul_coopmat.comp.
  return {s.mma_m, s.mma_n, s.mma_k, t.bm,  t.bn,  t.bk, t.wm, t.wn, t.subgroups() * kSubgroup,
          trans_a, trans_b, vec_a,   vec_b, f16_a, f16_b};
}

}  // namespace vkf::ops::detail
