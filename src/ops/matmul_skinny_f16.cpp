// The launch rules of matmul_skinny_f16.comp (see matmul_kernels.h): weight rows per thread,
// groups of threads per row (the K split), the workgroup cap, the tree form and the staged
// activation row, and the specialization constants that carry them; each rule's measurements are
// in bench/RESULTS.md (generation throughput). The dispatch itself is in matmul_kernels.cpp
// (dispatch_skinny_f16) and ops/decode.cpp (the gated variant).
#include <algorithm>

#include "core/launch.h"
#include "ops/matmul_kernels.h"
#include "vk/context.h"
#include "vk/error.h"

namespace vkf::ops::detail {
namespace {

// Weight rows per thread: 0 chooses by shape, else forced (tests, benches).
uint32_t g_skinny_rows_per_thread = 0;
// Forced by set_skinny_f16_max_groups (0: one workgroup per block of weight rows), else the rule.
uint32_t g_skinny_max_groups = 0;
bool g_skinny_max_groups_forced = false;
bool g_skinny_shuffle_tree = true;  // where the device allows it
uint32_t g_skinny_k_split = 0;      // 0: by shape
bool g_skinny_stage_normed = true;  // where it fits
bool g_skinny_early_epilogue = false;
int g_skinny_uniform_loops = -1;  // -1: the rule (skinny_f16_uniform_loops)

}  // namespace

uint32_t skinny_f16_groups(int64_t m, int64_t blocks, uint32_t k_split) {
  // One activation row: four workgroups per multiprocessor where the driver reports them. On the
  // H200 (132), two per multiprocessor had taken a batch-1 decode step from 1.36-1.37 ms to 1.33
  // (1, 4, 8 and 16 measured in between, thirteenth session); since the normed products stage
  // their row and take two weight rows per thread, four measured better: 1.017 -> 1.009 ms per
  // step, alternated three times (twenty-first session; the gated gate/up product's 512 blocks
  // then run one per workgroup: 0.330 -> 0.322 ms per step), and three worse (1.150 ms in the
  // stage profile against 1.136). At batch 8 the loop cost more than it saved. Rows split over
  // several thread groups (the down projection) run uncapped: 1.250 ms per step against 1.270
  // with them capped too, 1.290 unsplit.
  const int64_t cap = g_skinny_max_groups_forced ? int64_t{g_skinny_max_groups}
                      : m == 1 && k_split == 1
                          ? 4 * int64_t{vk::Context::get().info().multiprocessors}
                          : 0;
  if (cap == 0) return static_cast<uint32_t>(blocks);
  return static_cast<uint32_t>(std::min<int64_t>(blocks, cap));
}

std::vector<uint32_t> skinny_f16_spec(const SkinnyF16Plan& plan, int64_t m, int64_t k, bool trans_a,
                                      bool vec8, uint32_t act, uint32_t norm_mode, uint32_t groups,
                                      uint32_t blocks, bool argmax) {
  // Ids 0..12: MROWS, TRANS_A, VEC8, ACT, RPT, NORM, BLOCK_LOOP, SHUFFLE_TREE, K_SPLIT_SPEC,
  // STAGED_LEN4, ARGMAX_SPEC, EARLY_EPILOGUE_SPEC, UNIFORM_LOOPS.
  return {static_cast<uint32_t>(m),
          trans_a ? 1u : 0u,
          vec8 ? 1u : 0u,
          act,
          plan.rows_per_thread,
          norm_mode,
          groups < blocks ? 1u : 0u,
          skinny_f16_shuffle_tree() ? 1u : 0u,
          plan.k_split,
          plan.staged ? static_cast<uint32_t>(k / 4) : 1u,
          argmax ? 1u : 0u,
          g_skinny_early_epilogue ? 1u : 0u,
          skinny_f16_uniform_loops(m) ? 1u : 0u};
}

bool skinny_f16_uniform_loops(int64_t m) {
  if (g_skinny_uniform_loops >= 0) return g_skinny_uniform_loops == 1;
  // lavapipe's memory-model builds need them (the shader's UNIFORM_LOOPS,
  // vmm_builds_need_uniform_loops). Elsewhere by speed: on the H200 (bench/RESULTS.md,
  // twenty-fifth session) a 1B decode step at batch 1 took 1.031 / 1.032 ms with them against
  // 1.043 / 1.046 with the plain loops, at batch 8 2.821 / 2.800 against 2.572 / 2.547.
  if (vmm_builds_need_uniform_loops()) return true;
  return m == 1;
}

void set_skinny_f16_uniform_loops(int mode) {
  VKF_REQUIRE(mode >= -1 && mode <= 1,
              "skinny f16 uniform loops must be -1 (the rule), 0 or 1, got {}", mode);
  g_skinny_uniform_loops = mode;
}

bool skinny_f16_row_staged(int64_t m, int64_t k, bool vec8, uint32_t norm_mode) {
  // One row, folded norm, 16-byte loads, and room beside the kernel's other shared arrays (8
  // rows x 256 partial sums, in f64 for the precise build: 16 KiB, plus the rows' rstd and the
  // groups' argmax pairs).
  constexpr int64_t kOtherShared = 16 * 1024 + 128;
  return g_skinny_stage_normed && m == 1 && norm_mode != 0 && vec8 &&
         4 * k + kOtherShared <= vk::Context::get().info().max_shared_memory;
}

void set_skinny_f16_stage_normed(bool staged) {
  g_skinny_stage_normed = staged;
}

void set_skinny_f16_early_epilogue(bool on) {
  g_skinny_early_epilogue = on;
}

namespace {

// The split rule without set_skinny_f16_k_split's override: up to 4 slices, while every slice keeps
// one whole round of loads (UNROLL = 8 loads of 8 halves per thread, 32 threads: 2048 halves at
// one weight row per thread, 1024 at two, which share the round's loads).
uint32_t auto_k_split(int64_t k, uint32_t rpt = 1) {
  const int64_t round = 8 * 8 * 32 / int64_t{rpt};
  uint32_t split = 1;
  while (split < 4 && k / (2 * split) >= round) split *= 2;
  return split;
}

// Whether one plain activation row with two weight rows per thread splits by rounds of 1024 halves
// (set_skinny_f16_half_round_split), so that K = 2048 products split too.
bool g_skinny_half_round_split = true;

// The split's rule without set_skinny_f16_k_split's override, for a product the kernel splits.
// One plain row (read from L2, not staged) with two weight rows per thread: slices of half a
// round, each read once for both rows, so that K = 2048 products (o, an unfolded LM head) split
// in two. H200 (twenty-first session, bench/RESULTS.md), stage profile: o 0.122 -> 0.112 ms per
// step, the plain head 0.130 -> 0.119; the step, alternated three times, 1.034 -> 1.013 ms. A
// staged row gains nothing from fewer reads of it per workgroup: the normed q/k/v got slower split
// (0.140 -> 0.152), and the folded head split with its workgroup cap kept 0.125 against 0.119
// plain, so staged rows keep whole rounds.
uint32_t rule_k_split(int64_t k, uint32_t rpt, int64_t m, bool staged) {
  if (m == 1 && rpt == 2 && !staged && g_skinny_half_round_split) return auto_k_split(k, 2);
  return auto_k_split(k);
}

}  // namespace

uint32_t skinny_f16_k_split(int64_t k, uint32_t rpt, bool vec8, int64_t m, bool staged) {
  // The kernel's rule (K_SPLIT): 16-byte loads, and one weight row per thread or one activation
  // row.
  if (!vec8 || (rpt != 1 && m != 1)) return 1;
  if (g_skinny_k_split != 0) return g_skinny_k_split;
  return rule_k_split(k, rpt, m, staged);
}

void set_skinny_f16_half_round_split(bool on) {
  g_skinny_half_round_split = on;
}

void set_skinny_f16_k_split(uint32_t split) {
  VKF_REQUIRE(split == 0 || split == 1 || split == 2 || split == 4 || split == 8,
              "skinny f16 k split: {} (use 0 for the automatic choice, or 1, 2, 4 or 8)", split);
  g_skinny_k_split = split;
}

bool skinny_f16_shuffle_tree() {
  if (!g_skinny_shuffle_tree) return false;
  const vk::DeviceInfo& info = vk::Context::get().info();
  return info.subgroup_shuffle && info.subgroup_size == 32 && info.min_subgroup_size == 32;
}

void set_skinny_f16_shuffle_tree(bool allowed) {
  g_skinny_shuffle_tree = allowed;
}

void set_skinny_f16_max_groups(std::optional<uint32_t> groups) {
  g_skinny_max_groups_forced = groups.has_value();
  g_skinny_max_groups = groups.value_or(0);
}

void set_skinny_f16_rows_per_thread(uint32_t rows) {
  VKF_REQUIRE(rows == 0 || rows == 1 || rows == 2 || rows == 4,
              "skinny f16 rows per thread: {} (use 0 for the automatic choice, or 1, 2 or 4)",
              rows);
  g_skinny_rows_per_thread = rows;
}

uint32_t skinny_f16_rows_per_thread(int64_t m, int64_t n, bool vec8, bool staged, int64_t k,
                                    bool gated) {
  constexpr int64_t kMinGroups = 128;
  if (!vec8) return 1;
  if (g_skinny_rows_per_thread != 0) return g_skinny_rows_per_thread;
  // One staged row (a decode step's normed products at batch 1): each thread's loads of two
  // weight rows go out before either is used, twice the bytes in flight per thread in a grid that
  // skinny_f16_groups caps at a few workgroups per multiprocessor, and the second row's
  // activations come from shared memory. H200, forced for every product (bench/RESULTS.md,
  // twentieth session): the gated gate/up product 0.356 -> 0.327 ms per step, the q/k/v stage
  // 0.162 -> 0.139; the plain products, which read their row from L2 and lose the K split, got
  // slower (down 0.262 -> 0.313, o 0.119 -> 0.131).
  if (m == 1 && staged) return 2;
  // One plain row whose weight rows the K split cuts (the plain variant only: the gated one does
  // not split): two rows per thread as well, each slice of the activation row read once for both.
  // H200 (twentieth session), alternated three times: batch-1 steps 1.084 / 1.070 / 1.115 ->
  // 1.040 / 1.030 / 1.032 ms for the down projection's K = 8192; with slices of half a round
  // (skinny_f16_k_split) K = 2048 splits too (o, the LM head). Without a split, K = 2048 products
  // (o) got slower with two rows: then they keep one. (The rule's split, not a forced one: forcing
  // a split does not change the rows.)
  if (m == 1 && !gated) return rule_k_split(k, 2, m, false) > 1 ? 2 : 1;
  if (m < 2) return 1;
  uint32_t rpt = 4;
  while (rpt > 1 && div_up(n, kSkinnyF16Cols * rpt) < kMinGroups) rpt /= 2;
  return rpt;
}

SkinnyF16Plan plan_skinny_f16(int64_t m, int64_t n, int64_t k, bool vec8, uint32_t norm_mode,
                              bool gated) {
  SkinnyF16Plan plan;
  plan.staged = skinny_f16_row_staged(m, k, vec8, norm_mode);
  plan.rows_per_thread = skinny_f16_rows_per_thread(m, n, vec8, plan.staged, k, gated);
  plan.k_split = gated ? 1u : skinny_f16_k_split(k, plan.rows_per_thread, vec8, m, plan.staged);
  return plan;
}

void reset_skinny_f16_settings() {
  g_skinny_rows_per_thread = 0;
  g_skinny_max_groups = 0;
  g_skinny_max_groups_forced = false;
  g_skinny_shuffle_tree = true;
  g_skinny_k_split = 0;
  g_skinny_stage_normed = true;
  g_skinny_half_round_split = true;
  g_skinny_early_epilogue = false;
  g_skinny_uniform_loops = -1;
}

}  // namespace vkf::ops::detail
