// Kernel choice for ops::attention (see attention_coopmat.h). The shared-memory sizes below mirror
// the declarations of the flash_attn_*.comp and attention_fast_*.comp shaders, so that a device
// that cannot hold them is routed to other kernels instead of failing at pipeline creation.
#include "ops/attention_coopmat.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>

#include "core/launch.h"
#include "ops/coopmat_layout.h"
#include "ops/matmul_coopmat.h"
#include "vk/context.h"
#include "vk/error.h"
#include "vk/pipeline.h"

namespace vkf::ops::detail {
namespace {

// The fp32 register-tiled kernels serve head dims up to this (attention_fast_*.comp's DMAX).
constexpr int64_t kFastMaxHeadDim = 64;

bool plain_forced() {
  const char* env = std::getenv("VKF_ATTENTION");
  return env && std::string(env) == "plain";
}

// Whether the tensor-core kernel whose module is `base` runs its hardware-conversion build
// (`base` + "_hwcvt"): where the conversion setting and the device allow it and the build exists.
bool flash_hardware_convert(const std::string& base) {
  return f16_convert() != F16Convert::Exact && coopmat_support().hardware_convert &&
         vk::Pipelines::has_module(base + "_hwcvt");
}

// 16-row query fragments per subgroup of the forward kernel (QF in flash_attn_fwd.comp): 1, or 2
// where VKF_FLASH_FWD=q2 asks for its q2 variant (the earlier default, for A/B timing), which
// exists as a hardware-conversion build only. The environment is read once.
uint32_t flash_fwd_fragments() {
  static const bool q2_requested = [] {
    const char* env = std::getenv("VKF_FLASH_FWD");
    const std::string v = env ? env : "";
    VKF_REQUIRE(v.empty() || v == "q1" || v == "q2", "VKF_FLASH_FWD='{}': use q1 or q2", v);
    return v == "q2";
  }();
  return q2_requested && !coopmat_emulation() && flash_hardware_convert("flash_attn_fwd_d64") ? 2
                                                                                              : 1;
}

bool g_row_shuffle_allowed = true;

// The tensor-core accumulators have the quad layout (ops/coopmat_layout.h): where the device's
// probe found it, and always in the emulation, which has it by construction.
bool accumulators_in_quad_layout() {
  return coopmat_emulation() || is_quad_layout(accumulator_layout());
}

// Subgroups per workgroup of the kernels (NUM_SG in the shaders).
uint32_t subgroups() {
  return coopmat_emulation() ? 2 : 4;
}

// Bytes of shared memory each kernel declares (the d64 builds), mirroring the shaders' layouts in
// uvec4 (16-byte) units: staged rows of 64 + 8 halves; the emulated builds keep the operands that
// real subgroups hold in registers in shared memory of their own and add conversion scratch.
uint32_t shared_bytes(const std::string& kernel) {
  constexpr uint32_t kRowVec = (64 + 8) / 8, kVec = 16;
  const bool emulated = coopmat_emulation();
  const uint32_t sg = subgroups(), rows = flash_rows(kernel);
  if (kernel == "fwd") {
    constexpr uint32_t keys = 32, scratch_pitch = keys + 4;
    const uint32_t tiles = 2 * keys * kRowVec + sg * (rows / sg) * scratch_pitch / 4;
    const uint32_t q = rows * kRowVec;
    const uint32_t vec = emulated ? tiles + q : std::max(tiles, q);
    return vec * kVec + 3 * rows * 4 + keys * 4;
  }
  if (kernel == "dq_ds") {  // the k tile and the ds^T tile (32 keys of rows + 8 halves)
    constexpr uint32_t keys = 32;
    return (keys * kRowVec + keys * (rows + 8) / 8) * kVec;
  }
  if (kernel == "dq") {
    constexpr uint32_t keys = 32, index_vec = 64;
    const uint32_t tiles = 2 * keys * kRowVec;
    const uint32_t vec = emulated ? tiles + sg * 16 * keys / 8 + 2 * rows * kRowVec
                                  : std::max(tiles, rows * kRowVec + index_vec);
    return vec * kVec + 2 * rows * 4 + keys * 4;
  }
  constexpr uint32_t queries = 32;
  const uint32_t tiles = 2 * queries * kRowVec, kv = rows * kRowVec;
  const uint32_t vec = emulated ? tiles + sg * 2 * 16 * queries / 8 + 2 * kv : std::max(tiles, kv);
  return vec * kVec + 2 * queries * 4 + rows * 4;
}

// Bytes of shared memory of the fp32 register-tiled kernels, mirroring attention_fast.glsl and the
// kernels' declarations: rows of 17 vec4 (64 floats + 4), row groups of 8 invocations and 4 rows
// with exchange regions of 4 rows of (columns + 4) floats + 8, one float or uint per tile row for
// key flags, logsumexp and delta.
constexpr uint32_t kRowBytes = 17 * 16;
constexpr uint32_t exchange_bytes(uint32_t columns) {
  return (4 * ((columns + 4) / 4) + 2) * 16;
}
// Forward: Q (bq rows), K (32), V (32 rows of 64 floats), one exchange per row group, key flags;
// the barrier build adds its reduction scratch (8 floats per row).
constexpr uint32_t fast_fwd_bytes(uint32_t bq, bool barriers) {
  return (bq + 32) * kRowBytes + 32 * 256 + bq / 4 * exchange_bytes(32) + 32 * 4 +
         (barriers ? bq * 8 * 4 : 0);
}
// dq: Q and dO (32 rows), K and V (bk), one exchange per row group (8), key flags.
constexpr uint32_t fast_dq_bytes(uint32_t bk) {
  return (2 * 32 + 2 * bk) * kRowBytes + 8 * exchange_bytes(bk) + bk * 4;
}
// dk/dv: K and V (32 rows), Q and dO (bq), two exchanges per row group (8), logsumexp and delta.
constexpr uint32_t fast_dkv_bytes(uint32_t bq) {
  return (2 * 32 + 2 * bq) * kRowBytes + 2 * 8 * exchange_bytes(bq) + 2 * bq * 4;
}

// One build of an fp32 register-tiled kernel: module suffix, rows per workgroup (queries, or keys
// for dk/dv) and bytes of shared memory.
struct FastVariant {
  const char* suffix;
  uint32_t rows;
  uint32_t shared_bytes;
};
// Large tiles, small tiles (32 KiB), and the build synchronised by workgroup barriers (for dq and
// dk/dv the small build itself: they use no subgroup operations).
struct FastKernelBuilds {
  FastVariant large, small, barriers;
};
constexpr FastKernelBuilds kFastFwd{{"q64", 64, fast_fwd_bytes(64, false)},
                                    {"q32", 32, fast_fwd_bytes(32, false)},
                                    {"q32_shared", 32, fast_fwd_bytes(32, true)}};
constexpr FastKernelBuilds kFastDq{{"k32", 32, fast_dq_bytes(32)},
                                   {"k16", 32, fast_dq_bytes(16)},
                                   {"k16", 32, fast_dq_bytes(16)}};
constexpr FastKernelBuilds kFastDkv{{"q32", 32, fast_dkv_bytes(32)},
                                    {"q16", 32, fast_dkv_bytes(16)},
                                    {"q16", 32, fast_dkv_bytes(16)}};
static_assert(fast_fwd_bytes(32, true) <= 32768 && fast_dq_bytes(16) <= 32768 &&
                  fast_dkv_bytes(16) <= 32768,
              "the small builds must fit 32 KiB of shared memory (lavapipe)");
static_assert(fast_fwd_bytes(64, false) <= 49152 && fast_dq_bytes(32) <= 49152 &&
                  fast_dkv_bytes(32) <= 49152,
              "the large builds must fit 48 KiB of shared memory (NVIDIA)");

FastAttentionBuilds& fast_builds_slot() {
  static FastAttentionBuilds builds = FastAttentionBuilds::Auto;
  return builds;
}

bool lists_16x16x16(const vk::DeviceInfo& info) {
  for (const auto& s : info.coopmat_nv_shapes)
    if (s.m == 16 && s.n == 16 && s.k == 16 && s.a_type == "f16" && s.b_type == "f16" &&
        s.c_type == "f32" && s.result_type == "f32" && s.scope == "subgroup")
      return true;
  return false;
}

}  // namespace

uint32_t flash_rows(const std::string& kernel) {
  return (kernel == "fwd" ? 16 * flash_fwd_fragments() : 16) * subgroups();
}

const char* attention_kernels_name(AttentionKernels kernels) {
  switch (kernels) {
    case AttentionKernels::Plain:
      return "plain";
    case AttentionKernels::Fast:
      return "fast";
    case AttentionKernels::Coopmat:
      return "coopmat";
  }
  return "?";
}

std::string flash_module(const std::string& kernel) {
  const std::string base = "flash_attn_" + kernel + "_d64";
  if (coopmat_emulation()) return base + "_emulated";
  if (kernel == "dq_ds") return base;  // converts nothing: one hardware build
  if (kernel == "fwd" && flash_fwd_fragments() == 2) return base + "_hwcvt_q2";
  return flash_hardware_convert(base) ? base + "_hwcvt" : base;
}

bool flash_row_shuffle() {
  static const bool shared_requested = [] {
    const char* env = std::getenv("VKF_FLASH_ROWS");
    const std::string v = env ? env : "";
    VKF_REQUIRE(v.empty() || v == "auto" || v == "shared",
                "VKF_FLASH_ROWS='{}': use auto or shared", v);
    return v == "shared";
  }();
  if (shared_requested || !g_row_shuffle_allowed) return false;
  return accumulators_in_quad_layout();
}

void set_flash_row_shuffle(bool allowed) {
  g_row_shuffle_allowed = allowed;
}

namespace {
bool g_quad_rows_allowed = true;
}  // namespace

bool flash_quad_rows() {
  return g_quad_rows_allowed && accumulators_in_quad_layout();
}

void set_flash_quad_rows(bool allowed) {
  g_quad_rows_allowed = allowed;
}

namespace {
std::optional<bool> g_dkv_per_head;  // unset: VKF_FLASH_DKV, else per head
}  // namespace

bool flash_dkv_per_head() {
  if (!g_dkv_per_head) {
    const char* env = std::getenv("VKF_FLASH_DKV");
    const std::string v = env ? env : "";
    VKF_REQUIRE(v.empty() || v == "heads" || v == "group",
                "VKF_FLASH_DKV='{}': use heads (per-head partials) or group", v);
    g_dkv_per_head = v != "group";
  }
  return *g_dkv_per_head;
}

void set_flash_dkv_per_head(bool on) {
  g_dkv_per_head = on;
}

namespace {
std::optional<FastDqSource> g_fast_dq_source;  // unset: VKF_ATTENTION_DQ, else Auto
}  // namespace

void set_fast_dq_source(FastDqSource source) {
  g_fast_dq_source = source;
}

bool flash_dq_from_stored_ds_available() {
  const std::string module = flash_module("dq_ds");
  return vk::Pipelines::has_module(module) &&
         shared_bytes("dq_ds") <= vk::Context::get().info().max_shared_memory;
}

uint64_t fast_stored_ds_max_bytes() {
  return std::min(kFastStoredDsMaxBytes, vk::Context::get().info().device_local_bytes() / 32);
}

bool fast_dq_from_stored_ds(uint64_t ds_bytes, bool auto_stores) {
  if (!g_fast_dq_source) {
    const char* env = std::getenv("VKF_ATTENTION_DQ");
    const std::string v = env ? env : "";
    VKF_REQUIRE(v.empty() || v == "stored" || v == "recompute",
                "VKF_ATTENTION_DQ='{}': use stored (dq from the dk/dv kernel's score gradients) "
                "or recompute",
                v);
    g_fast_dq_source = v == "stored"      ? FastDqSource::Stored
                       : v == "recompute" ? FastDqSource::Recompute
                                          : FastDqSource::Auto;
  }
  switch (*g_fast_dq_source) {
    case FastDqSource::Stored:
      return true;
    case FastDqSource::Recompute:
      return false;
    case FastDqSource::Auto:
      break;
  }
  return auto_stores && ds_bytes <= fast_stored_ds_max_bytes();
}

std::string attention_coopmat_unfit(int64_t head_dim, float dropout_p) {
  if (matmul_precision() != MatmulPrecision::F16) return "matmul precision is fp32";
  if (math_mode() != MathMode::Fast) return "math mode is precise";
  if (plain_forced()) return "VKF_ATTENTION=plain";
  if (coopmat_choice() == "off") return "cooperative matrices are off";
  if (dropout_p > 0) return "attention dropout is on (the fp32 plain kernels apply it)";
  if (head_dim > kFlashMaxHeadDim)
    return fmt::format("head_dim {} exceeds the tensor-core kernels' {}", head_dim,
                       kFlashMaxHeadDim);
  const CoopmatSupport support = coopmat_support();
  if (!support.unsupported.empty()) return support.unsupported;
  const auto& info = vk::Context::get().info();
  if (!coopmat_emulation() && !lists_16x16x16(info))
    return "the device lists no 16x16x16 f16 x f16 + f32 subgroup fragment shape";
  for (const char* kernel : {"fwd", "dq", "dkv"}) {
    const std::string module = flash_module(kernel);
    if (!vk::Pipelines::has_module(module))
      return fmt::format("this build has no {} module", module);
    const uint32_t bytes = shared_bytes(kernel);
    if (bytes > info.max_shared_memory)
      return fmt::format("{} needs {} bytes of shared memory, the device allows {}", module, bytes,
                         info.max_shared_memory);
  }
  return "";
}

void set_fast_attention_builds(FastAttentionBuilds builds) {
  fast_builds_slot() = builds;
}

FastAttentionModules fast_attention_modules() {
  const auto& info = vk::Context::get().info();
  const FastAttentionBuilds builds = fast_builds_slot();
  // Row groups of 8 consecutive invocations must lie inside one subgroup (attention_fast.glsl).
  const bool subgroups = builds != FastAttentionBuilds::WorkgroupBarriers &&
                         info.subgroup_shuffle && info.min_subgroup_size >= 8;
  FastAttentionModules m;
  m.fits = true;
  const auto pick = [&](const char* kernel, const FastKernelBuilds& table, std::string* module,
                        uint32_t* rows) {
    const FastVariant* chosen = &table.barriers;
    if (subgroups)
      chosen =
          builds == FastAttentionBuilds::Auto && table.large.shared_bytes <= info.max_shared_memory
              ? &table.large
              : &table.small;
    if (chosen->shared_bytes > info.max_shared_memory) m.fits = false;
    *module = std::string(kernel) + "_" + chosen->suffix;
    *rows = chosen->rows;
  };
  pick("attention_fast_fwd", kFastFwd, &m.fwd, &m.fwd_rows);
  pick("attention_fast_bwd_dq", kFastDq, &m.dq, &m.dq_rows);
  pick("attention_fast_bwd_dkv", kFastDkv, &m.dkv, &m.dkv_rows);
  return m;
}

AttentionKernels attention_kernels(int64_t head_dim, float dropout_p) {
  if (attention_coopmat_unfit(head_dim, dropout_p).empty()) return AttentionKernels::Coopmat;
  // Dropout of the probabilities lives in the plain kernels only.
  if (!plain_forced() && math_mode() == MathMode::Fast && head_dim <= kFastMaxHeadDim &&
      dropout_p == 0 && fast_attention_modules().fits)
    return AttentionKernels::Fast;
  return AttentionKernels::Plain;
}

}  // namespace vkf::ops::detail
