// The decode step's attention ops (see decode.h): rope_kv_write (rope_kv_write.comp), and
// attention_decode and the fused attention_decode_rope on attention_decode_fast.comp (query heads
// that share a kv head in one workgroup, dot products split over lanes and finished with subgroup
// shuffles, long caches split over workgroups whose partials attention_decode_combine.comp
// combines). Devices without subgroup shuffles over groups of 8 invocations, and
// VKF_ATTENTION=plain, take the plain path: attention_decode.comp, one workgroup per query head,
// and for the fused op rope_kv_write followed by it.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "core/launch.h"
#include "ops/attention_params.h"
#include "ops/decode.h"
#include "ops/decode_common.h"
#include "vk/error.h"
#include "vk/pipeline.h"

namespace vkf::ops {
namespace {

using detail::AttnParams;
using detail::check_caches;
constexpr int64_t kMaxHeadDim = 256;  // attention_decode's DMAX; the fast kernel's 8 lanes x 32
constexpr int64_t kMaxGroups = 65535;

// attention_decode_fast.comp's constants and flag bits.
constexpr int64_t kLanes = 8;              // LANES: invocations per key
constexpr int64_t kLaneGroups = 16;        // GROUPS: keys in flight per workgroup
constexpr int64_t kMinPassesPerSplit = 2;  // MIN_PASSES (and attention_decode_combine's)
constexpr uint32_t kFlagRope = 4, kFlagInterleaved = 8;
// Splits: enough workgroups to spread a long cache over a large GPU (a few per multiprocessor),
// never more than the cache has passes for; and only for capacities of at least
// kMinPassesToSplit passes, where the passes saved outweigh the combine's extra dispatch.
constexpr int64_t kTargetWorkgroups = 256;
constexpr int64_t kMinPassesToSplit = 8;
constexpr int64_t kMaxSplits = 64;
int64_t g_heads_per_group = 0;  // 0: the rule of decode_attention_plan
int64_t g_keys_per_lane_group = 0;  // likewise
bool g_chain_attention = true;      // set_decode_attention_chaining
int g_attention_uniform_loops = -1;  // set_decode_attention_uniform_loops (-1: the rule)

// attention_decode_fast.comp's UNIFORM_LOOPS: only where lavapipe's memory-model builds need them;
// elsewhere the loops skip what an invocation does not own, which measured faster on the H200.
bool attention_uniform_loops() {
  if (g_attention_uniform_loops >= 0) return g_attention_uniform_loops == 1;
  return vmm_builds_need_uniform_loops();
}

bool plain_forced() {
  const char* env = std::getenv("VKF_ATTENTION");
  return env && std::string(env) == "plain";
}

// The checks attention_decode and attention_decode_rope share (q is the query before any rotation).
void check_attention(const char* op, const Tensor& q, const Tensor& cache_k, const Tensor& cache_v,
                     const Tensor& key_padding_mask, const Tensor& cached,
                     const AttentionOptions& opts) {
  check_caches(cache_k, cache_v, cached, op, "cached");
  const int64_t B = cache_k.dim(0), cap = cache_k.dim(1), hkv = cache_k.dim(2), D = cache_k.dim(3);
  VKF_REQUIRE(q.defined() && q.dtype() == DType::F32 && q.rank() == 4 && q.dim(0) == B &&
                  q.dim(1) == 1 && q.dim(3) == D && q.dim(2) > 0 && q.dim(2) % hkv == 0,
              "{}: q must be f32 [{}, 1, heads, {}] with heads a multiple of the cache's {} kv "
              "heads, got {}",
              op, B, D, hkv, q.defined() ? shape_str(q.shape()) : std::string("undefined"));
  VKF_REQUIRE(D <= kMaxHeadDim, "{}: head_dim {} exceeds the supported maximum {}", op, D,
              kMaxHeadDim);
  VKF_REQUIRE(q.dim(2) <= kMaxGroups && B <= kMaxGroups,
              "{}: {} heads x {} rows exceed a dispatch's grid", op, q.dim(2), B);
  if (key_padding_mask.defined()) {
    VKF_REQUIRE(
        key_padding_mask.dtype() == DType::I32 && key_padding_mask.is_contiguous() &&
            key_padding_mask.shape() == (Shape{B, cap}),
        "{}: key_padding_mask must be a contiguous I32 [{}, {}] (one entry per cache slot), got {}",
        op, B, cap, shape_str(key_padding_mask.shape()));
  }
  VKF_REQUIRE(std::isfinite(opts.scale), "{}: scale must be finite, got {}", op, opts.scale);
  VKF_REQUIRE(std::isfinite(opts.softcap) && opts.softcap >= 0,
              "{}: softcap must be 0 (none) or a positive finite value, got {}", op, opts.softcap);
  VKF_REQUIRE(opts.dropout_p == 0, "{}: attention dropout is for training; decoding has none", op);
  VKF_REQUIRE(opts.sliding_window >= 0, "{}: sliding_window must be 0 (none) or positive", op);
}

// The checks of a step's rotary inputs (rope_kv_write and attention_decode_rope): the new keys
// and values, the tables and the positions, against the cache and q.
void check_rope(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                const Tensor& cos, const Tensor& sin, const Tensor& positions,
                const Tensor& cache_k, int64_t rotary_dim) {
  const int64_t B = cache_k.dim(0), hkv = cache_k.dim(2), D = cache_k.dim(3);
  const Shape kv_shape{B, 1, hkv, D};
  for (const Tensor* t : {&k, &v}) {
    VKF_REQUIRE(t->defined() && t->dtype() == DType::F32 && t->shape() == kv_shape,
                "{}: the new {} must be f32 {} for a cache {}, got {}", op,
                t == &k ? "keys" : "values", shape_str(kv_shape), shape_str(cache_k.shape()),
                t->defined() ? shape_str(t->shape()) : std::string("undefined"));
  }
  VKF_REQUIRE(q.defined() && q.dtype() == DType::F32 && q.rank() == 4 && q.dim(0) == B &&
                  q.dim(1) == 1 && q.dim(3) == D && q.dim(2) > 0,
              "{}: q must be f32 [{}, 1, heads, {}], got {}", op, B, D,
              q.defined() ? shape_str(q.shape()) : std::string("undefined"));
  VKF_REQUIRE(rotary_dim >= 2 && rotary_dim % 2 == 0 && rotary_dim <= D,
              "{}: rotary_dim must be even and in [2, head_dim = {}], got {}", op, D, rotary_dim);
  const int64_t half = rotary_dim / 2;
  for (const Tensor* t : {&cos, &sin}) {
    VKF_REQUIRE(t->defined() && t->dtype() == DType::F32 && t->rank() == 2 && t->dim(0) > 0 &&
                    t->dim(1) == half && t->is_contiguous(),
                "{}: the cos/sin tables must be contiguous f32 [positions, {}]", op, half);
  }
  VKF_REQUIRE(cos.shape() == sin.shape(), "{}: cos {} and sin {} differ", op,
              shape_str(cos.shape()), shape_str(sin.shape()));
  VKF_REQUIRE(positions.defined() && positions.dtype() == DType::I32 && positions.is_contiguous() &&
                  positions.shape() == (Shape{B, 1}),
              "{}: positions must be a contiguous I32 [{}, 1] (one per row)", op, B);
  checked_u32(cos.numel(), "rope table element count");
}

// What attention_decode_rope rotates on the way (all contiguous), or nothing.
struct RopeInputs {
  Tensor k, v, cos, sin, positions;
  int64_t rotary_dim = 0;
  RopeLayout layout = RopeLayout::RotateHalf;
};

// Whether launch_fast runs the chained variant: only its memory-model build exists, so only where
// chained dispatches run those (core/launch.h), and only where the addresses it derives hold: the
// sin table right after the cos table (rope_cos_sin builds them so) and cached[0] right after the
// B positions (as DecodeStepRunner's inputs lie). Caches split over workgroups stay unchained: on
// the H200 a 1B step at prompt 1,000 took 1.302 ms with them chained against 1.175 with barriers
// (bench/RESULTS.md), and the combine pass after them keeps its barrier anyway. Batches over
// chain_max_rows() stay unchained, as the products do (core/launch.h).
bool chains_fast(const RopeInputs* rope, const Tensor& cached, int64_t B, int64_t splits) {
  if (!g_chain_attention || splits > 1 || B > chain_max_rows() || !chained_vmm_builds_run())
    return false;
  if (!rope) return true;
  const uint64_t half = static_cast<uint64_t>(rope->rotary_dim / 2);
  const uint64_t rows = static_cast<uint64_t>(rope->cos.dim(0));
  return rope->sin.address() == rope->cos.address() + 4 * rows * half &&
         cached.address() == rope->positions.address() + 4 * static_cast<uint64_t>(B);
}

// One launch of attention_decode_fast.comp; with `rope`, the fused op.
Tensor launch_fast(const Tensor& q, const RopeInputs* rope, const Tensor& cache_k,
                   const Tensor& cache_v, const Tensor& mask, const Tensor& cached,
                   const AttentionOptions& opts) {
  const int64_t B = cache_k.dim(0), cap = cache_k.dim(1), hkv = cache_k.dim(2), D = cache_k.dim(3);
  const int64_t hq = q.dim(2);
  const detail::DecodeAttentionPlan plan = detail::decode_attention_plan(B, cap, hq, hkv, D);
  // vec4 loads read the cache rows and, for the new key's lanes, the rows of k and v.
  bool vec4 = plan.vec4 && cache_k.address() % 16 == 0 && cache_v.address() % 16 == 0;
  if (rope) vec4 = vec4 && rope->k.address() % 16 == 0 && rope->v.address() % 16 == 0;
  // Scratch of the split partials: a record of D + 2 values per (head group, row, split, head),
  // in 8-byte units (the precise build's doubles).
  Tensor scratch;
  if (plan.splits > 1)
    scratch = Tensor::empty(
        {2 * hkv * plan.head_groups * B * plan.splits * plan.heads_per_group * (D + 2)},
        DType::F32);
  Tensor out = Tensor::empty(q.shape(), DType::F32);
  uint32_t flags = mask.defined() ? detail::kAttnFlagMask : 0u;
  int64_t half = 0, table_rows = 0;
  if (rope) {
    flags |= kFlagRope | (rope->layout == RopeLayout::Interleaved ? kFlagInterleaved : 0u);
    half = rope->rotary_dim / 2;
    table_rows = rope->cos.dim(0);
  }
  const uint64_t none = 0;
  struct {
    uint64_t q, k_new, v_new, cos, sin, pos, cached, cache_k, cache_v, mask, out, scratch;
    uint32_t capacity, heads, window, table_rows, d, half_flags;
    float scale, softcap;
  } push{q.address(),
         rope ? rope->k.address() : none,
         rope ? rope->v.address() : none,
         rope ? rope->cos.address() : none,
         rope ? rope->sin.address() : none,
         rope ? rope->positions.address() : none,
         cached.address(),
         cache_k.address(),
         cache_v.address(),
         mask.defined() ? mask.address() : none,
         out.address(),
         scratch.defined() ? scratch.address() : none,
         static_cast<uint32_t>(cap),
         static_cast<uint32_t>(hq) | static_cast<uint32_t>(hkv) << 16,
         opts.sliding_window >= cap ? 0u : static_cast<uint32_t>(opts.sliding_window),
         static_cast<uint32_t>(table_rows),
         static_cast<uint32_t>(D),
         static_cast<uint32_t>(half) | flags << 16,
         opts.scale,
         opts.softcap};
  static_assert(sizeof(push) == 128, "attention_decode_fast's push constants fill 128 bytes");
  const std::vector<uint32_t> spec = {static_cast<uint32_t>(plan.dims_per_lane),
                                      static_cast<uint32_t>(plan.heads_per_group),
                                      static_cast<uint32_t>(plan.keys_per_lane_group),
                                      vec4 ? 1u : 0u, attention_uniform_loops() ? 1u : 0u};
  const Grid grid{static_cast<uint32_t>(hkv * plan.head_groups), static_cast<uint32_t>(B),
                  static_cast<uint32_t>(plan.splits)};
  // The cost counts the whole cache (the filled length is known only on the device); the K and V
  // rows are read once per head group.
  const vk::DispatchCost cost{4.0 * static_cast<double>(B * hq * cap * D),
                              8.0 * static_cast<double>(B * cap * hkv * D * plan.head_groups)};
  // What the kernel reads and writes (undefined tensors are left out).
  const Tensor absent;
  const std::initializer_list<const Tensor*> reads = {&q,
                                                      rope ? &rope->k : &absent,
                                                      rope ? &rope->v : &absent,
                                                      rope ? &rope->cos : &absent,
                                                      rope ? &rope->sin : &absent,
                                                      rope ? &rope->positions : &absent,
                                                      &cached,
                                                      &cache_k,
                                                      &cache_v,
                                                      &mask};
  const std::initializer_list<const Tensor*> writes = {&out, rope ? &cache_k : &absent,
                                                       rope ? &cache_v : &absent, &scratch};
  if (chains_fast(rope, cached, B, plan.splits)) {
    // The chained variant's push block (see attention_decode_fast.comp): no sin and no cached
    // field, both derived from the fields before them.
    struct {
      uint64_t q, k_new, v_new, cos, pos_cached, cache_k, cache_v, mask, out, scratch;
      uint32_t capacity, heads, window, table_rows, d, half_flags;
      float scale, softcap;
      vk::ChainSync chain;  // filled by the stream
    } chained{push.q,
              push.k_new,
              push.v_new,
              push.cos,
              rope ? push.pos : push.cached,
              push.cache_k,
              push.cache_v,
              push.mask,
              push.out,
              push.scratch,
              push.capacity,
              push.heads,
              push.window,
              push.table_rows,
              push.d,
              push.half_flags,
              push.scale,
              push.softcap,
              {}};
    static_assert(sizeof(chained) == 128, "the chained variant's push constants fill 128 bytes");
    launch_chained("attention_decode_fast_chained", chained, offsetof(decltype(chained), chain),
                   grid, reads, writes, spec, cost);
  } else {
    launch("attention_decode_fast", push, grid, reads, writes, spec, cost);
  }
  if (plan.splits > 1) {
    // The splits' partials, combined in split order (a second stage only for caches this long).
    struct {
      uint64_t cached, out, partials;
      uint32_t capacity, heads, window, d, heads_per_group, splits, pass_keys;
    } combine{cached.address(),
              out.address(),
              scratch.address(),
              push.capacity,
              push.heads,
              push.window,
              push.d,
              static_cast<uint32_t>(plan.heads_per_group),
              static_cast<uint32_t>(plan.splits),
              static_cast<uint32_t>(kLaneGroups * plan.keys_per_lane_group)};
    launch("attention_decode_combine", combine, Grid{grid.x, grid.y, 1}, {&cached, &scratch},
           {&out}, {},
           {4.0 * static_cast<double>(B * hq * plan.splits * D),
            8.0 * static_cast<double>(scratch.numel() / 2)});
  }
  return out;
}

// attention_decode.comp: one workgroup per (query head, row), keys in chunks of 128.
Tensor launch_plain(const Tensor& q, const Tensor& cache_k, const Tensor& cache_v,
                    const Tensor& key_padding_mask, const Tensor& cached,
                    const AttentionOptions& opts) {
  const int64_t B = cache_k.dim(0), cap = cache_k.dim(1), hkv = cache_k.dim(2), D = cache_k.dim(3);
  Tensor out = Tensor::empty(q.shape(), DType::F32);
  AttnParams a{};
  a.tq = 1;
  a.tk = static_cast<uint32_t>(cap);
  a.hq = static_cast<uint32_t>(q.dim(2));
  a.hkv = static_cast<uint32_t>(hkv);
  a.d = static_cast<uint32_t>(D);
  a.causal = opts.causal ? 1 : 0;
  a.window = opts.sliding_window >= cap ? 0u : static_cast<uint32_t>(opts.sliding_window);
  a.scale = opts.scale;
  a.softcap = opts.softcap;
  struct {
    uint64_t q, k, v, mask, o, cached;
    AttnParams a;
    uint32_t flags;
  } push{q.address(),
         cache_k.address(),
         cache_v.address(),
         key_padding_mask.defined() ? key_padding_mask.address() : 0,
         out.address(),
         cached.address(),
         a,
         key_padding_mask.defined() ? detail::kAttnFlagMask : 0u};
  // The cost counts the whole cache (the filled length is known only on the device).
  launch("attention_decode", push, Grid{a.hq, static_cast<uint32_t>(B), 1},
         {&q, &cache_k, &cache_v, &key_padding_mask, &cached}, {&out}, {},
         {4.0 * static_cast<double>(B * q.dim(2) * cap * D),
          4.0 * static_cast<double>(cache_k.numel()) * 2});
  return out;
}

}  // namespace

namespace detail {

std::string decode_attention_fast_unfit(int64_t head_dim) {
  if (plain_forced()) return "VKF_ATTENTION=plain";
  if (head_dim > kLanes * 32) return fmt::format("head_dim {} exceeds 256", head_dim);
  for (const char* module : {"attention_decode_fast", "attention_decode_combine"})
    if (!vk::Pipelines::has_module(module))
      return fmt::format("this build has no {} module", module);
  const auto& info = vk::Context::get().info();
  // Lane groups of 8 consecutive invocations must lie inside one subgroup.
  if (!info.subgroup_shuffle || info.min_subgroup_size < kLanes)
    return fmt::format("the device's subgroups (at least {}, shuffles {}) cannot hold 8 lanes",
                       info.min_subgroup_size, info.subgroup_shuffle ? "yes" : "no");
  return "";
}

void set_decode_heads_per_group(int64_t heads) {
  VKF_REQUIRE(heads >= 0, "decode heads per workgroup must be >= 0, got {}", heads);
  g_heads_per_group = heads;
}

void set_decode_attention_chaining(bool on) {
  g_chain_attention = on;
}

void set_decode_attention_uniform_loops(int mode) {
  VKF_REQUIRE(mode >= -1 && mode <= 1,
              "decode attention uniform loops must be -1 (the rule), 0 or 1, got {}", mode);
  g_attention_uniform_loops = mode;
}

void set_decode_keys_per_lane_group(int64_t keys) {
  VKF_REQUIRE(keys >= 0 && keys <= 8,
              "decode keys per lane group must be 0 (the rule) or 1..8, got {}", keys);
  g_keys_per_lane_group = keys;
}

DecodeAttentionPlan decode_attention_plan(int64_t batch, int64_t capacity, int64_t q_heads,
                                          int64_t kv_heads, int64_t head_dim) {
  DecodeAttentionPlan p;
  p.dims_per_lane = (head_dim + kLanes - 1) / kLanes;
  // Query heads per workgroup: grouping the heads of a kv head reads its keys and values once for
  // all of them (registers stay near 64 for the queries and 64 for the values: heads x dims),
  // but a grid of few workgroups leaves the GPU idle while each walks the cache. So the groups
  // shrink (to one head) until the grid reaches kTargetWorkgroups. Measured on the H200, 1B f16
  // decode (8 kv heads, 4 query heads each), one head per workgroup against four: batch 1 1.46
  // -> 1.40 ms per step, batch 8 2.82 -> 2.70, batch 1 at 1,000 cached tokens 1.65 -> 1.53.
  const int64_t ratio = q_heads / kv_heads;
  const int64_t max_heads = std::clamp<int64_t>(64 / p.dims_per_lane, 1, 8);
  int64_t heads = std::min(ratio, max_heads);
  if (g_heads_per_group > 0) {
    heads = std::min(heads, g_heads_per_group);
  } else {
    while (heads > 1 && kv_heads * ((ratio + heads - 1) / heads) * batch < kTargetWorkgroups)
      heads = (heads + 1) / 2;
  }
  p.head_groups = (ratio + heads - 1) / heads;
  p.heads_per_group = (ratio + p.head_groups - 1) / p.head_groups;
  // Keys per lane group and pass: 16 values per lane in flight (two keys at head_dim 64; four
  // measured the same at short caches and slower at 1,000 cached tokens: batch 1 1.53 against
  // 1.48 ms per step, batch 8 3.38 against 3.15).
  p.keys_per_lane_group = g_keys_per_lane_group > 0
                              ? g_keys_per_lane_group
                              : std::clamp<int64_t>(16 / p.dims_per_lane, 1, 4);
  p.vec4 = p.dims_per_lane % 4 == 0 && head_dim % 4 == 0;
  const int64_t pass = kLaneGroups * p.keys_per_lane_group;
  const int64_t passes = (capacity + pass - 1) / pass;
  const int64_t groups = kv_heads * p.head_groups * batch;
  p.splits = 1;
  if (passes >= kMinPassesToSplit) {
    p.splits = std::min({(kTargetWorkgroups + groups - 1) / groups,
                         (passes + kMinPassesPerSplit - 1) / kMinPassesPerSplit, kMaxSplits});
    p.splits = std::max<int64_t>(p.splits, 1);
  }
  return p;
}

}  // namespace detail

Tensor rope_kv_write(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cos,
                     const Tensor& sin, const Tensor& positions, const Tensor& cache_k,
                     const Tensor& cache_v, const Tensor& slot_buf, int64_t rotary_dim,
                     RopeLayout layout) {
  const char* op = "rope_kv_write";
  check_caches(cache_k, cache_v, slot_buf, op, "slot");
  check_rope(op, q, k, v, cos, sin, positions, cache_k, rotary_dim);
  const int64_t B = cache_k.dim(0), cap = cache_k.dim(1), hkv = cache_k.dim(2), D = cache_k.dim(3);
  const int64_t half = rotary_dim / 2;
  const Tensor qc = q.is_contiguous() ? q : q.contiguous();
  const Tensor kc = k.is_contiguous() ? k : k.contiguous();
  const Tensor vc = v.is_contiguous() ? v : v.contiguous();
  Tensor out = Tensor::empty(q.shape(), DType::F32);
  struct {
    uint64_t q, k, v, cos, sin, pos, slot, q_out, cache_k, cache_v;
    uint32_t hq, hkv, d, half, positions, capacity, batch, flags;
  } push{qc.address(),
         kc.address(),
         vc.address(),
         cos.address(),
         sin.address(),
         positions.address(),
         slot_buf.address(),
         out.address(),
         cache_k.address(),
         cache_v.address(),
         static_cast<uint32_t>(q.dim(2)),
         static_cast<uint32_t>(hkv),
         static_cast<uint32_t>(D),
         static_cast<uint32_t>(half),
         static_cast<uint32_t>(cos.dim(0)),
         static_cast<uint32_t>(cap),
         static_cast<uint32_t>(B),
         layout == RopeLayout::Interleaved ? 1u : 0u};
  const int64_t per_row = half + (D - rotary_dim);
  const int64_t items = B * (q.dim(2) + hkv) * per_row + B * hkv * D;
  launch("rope_kv_write", push, grid_1d(items, 256),
         {&qc, &kc, &vc, &cos, &sin, &positions, &slot_buf}, {&out, &cache_k, &cache_v}, {},
         {6.0 * static_cast<double>(B * (q.dim(2) + hkv) * half),
          4.0 * static_cast<double>(2 * qc.numel() + 4 * kc.numel())});
  return out;
}

Tensor attention_decode(const Tensor& q, const Tensor& cache_k, const Tensor& cache_v,
                        const Tensor& key_padding_mask, const Tensor& cached,
                        const AttentionOptions& opts) {
  check_attention("attention_decode", q, cache_k, cache_v, key_padding_mask, cached, opts);
  const Tensor qc = q.is_contiguous() ? q : q.contiguous();
  if (detail::decode_attention_fast_unfit(cache_k.dim(3)).empty())
    return launch_fast(qc, nullptr, cache_k, cache_v, key_padding_mask, cached, opts);
  return launch_plain(qc, cache_k, cache_v, key_padding_mask, cached, opts);
}

Tensor attention_decode_rope(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cos,
                             const Tensor& sin, const Tensor& positions, const Tensor& cache_k,
                             const Tensor& cache_v, const Tensor& slot_buf,
                             const Tensor& key_padding_mask, const AttentionOptions& opts,
                             int64_t rotary_dim, RopeLayout layout) {
  const char* op = "attention_decode_rope";
  check_attention(op, q, cache_k, cache_v, key_padding_mask, slot_buf, opts);
  check_rope(op, q, k, v, cos, sin, positions, cache_k, rotary_dim);
  if (!detail::decode_attention_fast_unfit(cache_k.dim(3)).empty()) {
    // The composed path: the same rotation, then the plain kernel over the written cache.
    const Tensor rotated =
        rope_kv_write(q, k, v, cos, sin, positions, cache_k, cache_v, slot_buf, rotary_dim, layout);
    return launch_plain(rotated, cache_k, cache_v, key_padding_mask, slot_buf, opts);
  }
  const auto contiguous = [](const Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); };
  RopeInputs rope{contiguous(k), contiguous(v), cos, sin, positions, rotary_dim, layout};
  return launch_fast(contiguous(q), &rope, cache_k, cache_v, key_padding_mask, slot_buf, opts);
}

}  // namespace vkf::ops
