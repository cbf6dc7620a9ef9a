// Which kernels ops::attention runs, and what the tensor-core ones (src/shaders/flash_attn_fwd,
// flash_attn_dq, flash_attn_dkv .comp) need: F16 matmul precision, Fast math mode, no attention
// dropout, head_dim <= 64, and a device with NV cooperative matrices of 16 x 16 x 16 f16 x f16 ->
// f32 on subgroups of 32 (ops/matmul_coopmat.h's support test). Their numerics are mixed
// precision: q, k, v and the incoming gradient rounded to f16 as the tensor-core GEMM rounds
// them, scores and every accumulation in f32, probabilities and score gradients rounded to f16
// where they enter a product. Everything else runs the fp32 kernels of ops/attention.cpp.
#pragma once

#include <cstdint>
#include <string>

namespace vkf::ops::detail {

enum class AttentionKernels {
  Plain,    // attention_fwd / attention_bwd_*: any head_dim, dropout, Precise math (parity)
  Fast,     // attention_fast_*: fp32 register-tiled, head_dim <= 64, Fast math
  Coopmat,  // flash_attn_*: f16 tensor cores, F16 precision
};
const char* attention_kernels_name(AttentionKernels kernels);  // "plain", "fast", "coopmat"

// The kernels a call with this head dim and dropout probability runs under the current settings
// (matmul precision, math mode, cooperative-matrix choice and emulation, VKF_ATTENTION=plain).
AttentionKernels attention_kernels(int64_t head_dim, float dropout_p);

// Why the tensor-core kernels cannot serve such a call now, or "" when they can.
std::string attention_coopmat_unfit(int64_t head_dim, float dropout_p);

// Which builds of the fp32 register-tiled kernels (attention_fast_*.comp) run: Auto takes the
// largest tiles whose shared memory fits (about 44 KiB on NVIDIA, else the 32 KiB ones) with
// subgroup shuffles where every subgroup holds whole groups of 8 invocations (minimum subgroup
// size >= 8 and shuffles in compute shaders), else the builds that synchronise through workgroup
// barriers. SmallTiles forces the 32 KiB tiles and WorkgroupBarriers the barrier builds (tests
// and benchmarks compare them).
enum class FastAttentionBuilds { Auto, SmallTiles, WorkgroupBarriers };
void set_fast_attention_builds(FastAttentionBuilds builds);

// The modules and rows per workgroup the fast kernels run now. `fits` is false (and the fast
// kernels are not chosen) on a device whose shared memory cannot hold them.
struct FastAttentionModules {
  std::string fwd, dq, dkv;
  uint32_t fwd_rows = 0;  // queries per forward workgroup
  uint32_t dq_rows = 0;   // queries per dq workgroup
  uint32_t dkv_rows = 0;  // keys per dk/dv workgroup
  bool fits = false;
};
FastAttentionModules fast_attention_modules();

// The embedded module of one tensor-core kernel ("fwd", "dq" or "dkv"): the emulated build while
// set_coopmat_emulation(true) (tests), the hardware-conversion build where the device guarantees
// f16 rounding (as matmul_coopmat's f16_convert() allows), else the exact-conversion build.
std::string flash_module(const std::string& kernel);

// Queries per workgroup of the forward ("fwd") and dq kernels, keys per workgroup of the dk/dv
// kernel ("dkv"): BQ and BK in the shaders, for 4 subgroups (2 in the emulated builds).
uint32_t flash_rows(const std::string& kernel);
constexpr int64_t kFlashMaxHeadDim = 64;

// Whether the forward kernel takes its rows' maxima with subgroup shuffles (ROW_SHUFFLE in
// flash_attn_fwd.comp): where the probed accumulator layout is the quad one (ops/coopmat_layout.h)
// and always in the emulation, whose layout is that one; or through shared memory. The env
// VKF_FLASH_ROWS=shared (read once) and set_flash_row_shuffle(false) force shared memory (tests
// run both; on any other layout it is the only way).
bool flash_row_shuffle();
void set_flash_row_shuffle(bool allowed);

// Whether the tensor-core attention kernels take each accumulator component's row and column from
// the lane (the quad layout, and the emulation; flash_frag.glsl's COMP_ROW) instead of loading
// them from index matrices, which costs 16 registers per invocation. set_flash_quad_rows(false)
// forces the index matrices (tests compare the two).
bool flash_quad_rows();
void set_flash_quad_rows(bool allowed);

// Bit of the kernels' `flags` beyond attention_common.glsl's (FLAG_VEC4 in flash_frag.glsl): the
// operands start 16-byte aligned and head_dim is a multiple of 4, so rows are read as vec4.
constexpr uint32_t kFlashFlagVec4 = 4;
// The dk/dv kernel takes one query head per workgroup and writes per-head partials (GQA; see
// flash_attn_dkv.comp), which a second pass adds over each group.
constexpr uint32_t kFlashFlagHeadPartials = 8;
// The f16 copies of the operands the kernels stage tile by tile (k and v in the forward and dq, q
// and the output gradient in dk/dv: flash_frag.glsl's stage_tile) start 16-byte aligned and
// head_dim is a multiple of 8, so their 8-element chunks are read as 16 bytes.
constexpr uint32_t kFlashFlagTilesVec8 = 16;
// Whether the tensor-core dk/dv kernel splits a GQA group into per-head workgroups: by default
// yes (measured on the H200: see bench/RESULTS.md); VKF_FLASH_DKV=group (read once) or
// set_flash_dkv_per_head(false) keep one workgroup per key/value head (A/B timing, tests).
bool flash_dkv_per_head();
void set_flash_dkv_per_head(bool on);

// Where the fp32 register-tiled and the tensor-core backward take dq from. Stored: the dk/dv
// kernel, which forms every visible score gradient ds anyway, also writes them ([B, Hq, Tk, Tq]
// floats, or halves for the tensor-core kernels) and attention_fast_bwd_dq_ds.comp
// (flash_attn_dq_ds.comp) sums ds k from them: one product instead of three, with the same bits
// in fp32 (the tensor cores' sums may be ordered otherwise). Recompute:
// attention_fast_bwd_dq.comp (flash_attn_dq.comp) forms q.k and do.v again. Auto stores where the
// buffer takes at most fast_stored_ds_max_bytes(): kFastStoredDsMaxBytes (1B Llama at 8 x 1024
// tokens: exactly 1 GiB), or a 32nd of the device-local memory where that is less (so that a
// small GPU does not give up a large share of its memory to save time); recomputes beyond. The env
// VKF_ATTENTION_DQ=stored|recompute (read once) and set_fast_dq_source override Auto (A/B
// timing, tests).
enum class FastDqSource { Auto, Stored, Recompute };
void set_fast_dq_source(FastDqSource source);
constexpr uint64_t kFastStoredDsMaxBytes = uint64_t{1} << 30;
uint64_t fast_stored_ds_max_bytes();
// `auto_stores`: whether Auto stores at all for this family (kFlashStoresDsByDefault for the
// tensor-core kernels).
bool fast_dq_from_stored_ds(uint64_t ds_bytes, bool auto_stores = true);
// Whether this build and device have the tensor-core dq kernel that reads stored score gradients.
bool flash_dq_from_stored_ds_available();
// Auto's choice for the tensor-core kernels: recompute. Storing was timed on an H100 (thirty-
// sixth session, bench/RESULTS.md) as a wash: dq 0.35 ms per 1B layer faster, dk/dv 0.38 slower
// for writing ds, 0.5 GiB more peak; VKF_ATTENTION_DQ=stored still turns it on.
constexpr bool kFlashStoresDsByDefault = false;
// Bit of the fast kernels' `flags` (FLAG_DS_VEC4 in attention_fast.glsl): Tq is a multiple of 4,
// so the rows of the stored ds are written and read as vec4; the tensor-core kernels take the
// same bit for Tq a multiple of 8 (FLAG_DS_VEC8 in flash_frag.glsl, 16-byte chunks of halves).
constexpr uint32_t kFastFlagDsVec4 = 32;

}  // namespace vkf::ops::detail
