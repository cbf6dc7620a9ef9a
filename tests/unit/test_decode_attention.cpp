// The one-query decode attention against its CPU references: rope_kv_write (ref::rope_apply then
// the write; both layouts, partial rotary), attention_decode against ref::attention over the
// filled slots (GQA ratios 1 to 16, padding, sliding window, soft-cap, caches split over
// workgroups, head dims from 6 to 256, a row that sees no key, keys per lane group and pass from 1
// to 8; the fast kernel and the plain one), and the fused attention_decode_rope (outputs and cache
// contents bitwise those of rope_kv_write then attention_decode, and close to ref::rope_apply then
// ref::attention; every layout, partial rotary, splits, the precise build and the plain path);
// the fast kernel's shared-memory loops both ways (UNIFORM_LOOPS); determinism; bad input. The
// other decode ops are in test_decode_ops.cpp.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/launch.h"
#include "ops/attention_ref.h"
#include "ops/decode.h"
#include "ops/decode_ref.h"
#include "ops/rope_ref.h"
#include "test_util.h"

namespace vkf {
namespace {

// A key-padding mask [batch, cap] for the one-query attention tests: row 0's first `lead` slots
// are padding, the other rows have a hole every `step` slots from `first` up to `end`, and row 2
// (when there is one) has no key at all.
std::vector<int32_t> padding_mask(int64_t batch, int64_t cap, int64_t lead, int64_t first,
                                  int64_t step, int64_t end) {
  std::vector<int32_t> mask(static_cast<size_t>(batch * cap), 1);
  for (int64_t j = 0; j < lead; ++j) mask[static_cast<size_t>(j)] = 0;
  for (int64_t b = 1; b < batch; ++b)
    for (int64_t j = first; j < end; j += step) mask[static_cast<size_t>(b * cap + j)] = 0;
  if (batch > 2)
    for (int64_t j = 0; j < cap; ++j) mask[static_cast<size_t>(2 * cap + j)] = 0;
  return mask;
}

// Attention options of a decode test: the 1/sqrt(d) scale, a window and a soft-cap.
ops::AttentionOptions decode_options(int64_t d, int64_t window, float softcap) {
  ops::AttentionOptions opts;
  opts.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  opts.sliding_window = window;
  opts.softcap = softcap;
  return opts;
}

using test::Rng;

struct DecodeCase {
  int64_t batch, cap, hq, hkv, d, cached;
  int64_t window;
  float softcap;
};

void check_attention_decode(Rng& rng, const DecodeCase& c) {
  const int64_t keys = c.cached + 1;
  const auto q = test::as_f32(rng.normal(static_cast<size_t>(c.batch * c.hq * c.d)));
  const auto k = test::as_f32(rng.normal(static_cast<size_t>(c.batch * c.cap * c.hkv * c.d)));
  const auto v = test::as_f32(rng.normal(k.size()));
  // Left padding in row 0 (and in every other row a few holes); row 2, when present, sees no key.
  const auto mask = padding_mask(c.batch, c.cap, std::min<int64_t>(7, keys), 3, 11, keys);
  const ops::AttentionOptions opts = decode_options(c.d, c.window, c.softcap);
  const Tensor cached =
      Tensor::from_host_i32(std::vector<int32_t>{static_cast<int32_t>(c.cached)}, {1});
  const Tensor ck = test::to_gpu(k, {c.batch, c.cap, c.hkv, c.d}),
               cv = test::to_gpu(v, {c.batch, c.cap, c.hkv, c.d});
  const Tensor mt = Tensor::from_host_i32(mask, {c.batch, c.cap});
  const Tensor got =
      ops::attention_decode(test::to_gpu(q, {c.batch, 1, c.hq, c.d}), ck, cv, mt, cached, opts);
  // The reference sees the filled slots only.
  std::vector<double> kf, vf;
  std::vector<int64_t> mf;
  const int64_t row = c.hkv * c.d;
  for (int64_t b = 0; b < c.batch; ++b) {
    kf.insert(kf.end(), k.begin() + b * c.cap * row, k.begin() + (b * c.cap + keys) * row);
    vf.insert(vf.end(), v.begin() + b * c.cap * row, v.begin() + (b * c.cap + keys) * row);
    mf.insert(mf.end(), mask.begin() + b * c.cap, mask.begin() + b * c.cap + keys);
  }
  const auto want = ref::attention(q, kf, vf, mf, {c.batch, 1, keys, c.hq, c.hkv, c.d}, opts);
  const std::string what = "d=" + std::to_string(c.d) + " keys=" + std::to_string(keys) +
                           " window=" + std::to_string(c.window) +
                           " softcap=" + std::to_string(c.softcap);
  test::expect_close(got, want, 2e-6, 2e-5, what);
  // Deterministic, and without a mask every slot is a token.
  const Tensor again =
      ops::attention_decode(test::to_gpu(q, {c.batch, 1, c.hq, c.d}), ck, cv, mt, cached, opts);
  test::expect_bitwise_equal(got, again, what + " (twice)");
  const auto no_mask = ref::attention(q, kf, vf, {}, {c.batch, 1, keys, c.hq, c.hkv, c.d}, opts);
  test::expect_close(
      ops::attention_decode(test::to_gpu(q, {c.batch, 1, c.hq, c.d}), ck, cv, {}, cached, opts),
      no_mask, 2e-6, 2e-5, what + " without a mask");
}

// Routes attention_decode and attention_decode_rope to the plain kernels while alive.
struct PlainDecodeAttention {
  PlainDecodeAttention() { ::setenv("VKF_ATTENTION", "plain", 1); }
  ~PlainDecodeAttention() { ::unsetenv("VKF_ATTENTION"); }
};

// Cache splits of the fast kernel: how many workgroups share a (kv head group, row).
int64_t splits_of(const DecodeCase& c) {
  return ops::detail::decode_attention_plan(c.batch, c.cap, c.hq, c.hkv, c.d).splits;
}

const DecodeCase kDecodeCases[] = {
    {1, 9, 4, 4, 6, 0, 0, 0},           // the first key only, GQA ratio 1
    {2, 40, 4, 2, 6, 17, 0, 0},         // odd head dim, GQA
    {3, 600, 2, 1, 64, 560, 0, 0},      // nine passes over five splits, a masked row
    {2, 300, 4, 2, 64, 200, 50, 0},     // sliding window
    {2, 64, 6, 2, 130, 40, 0, 30.0f},   // dims past 128, soft-cap, GQA ratio 3
    {1, 20, 2, 1, 256, 19, 0, 0},       // the largest head dim
    {1, 1100, 8, 2, 64, 1000, 0, 0},    // a long cache over eight splits
    {1, 1100, 8, 2, 64, 1000, 300, 0},  // the window over a long cache, split
    {2, 70, 16, 1, 16, 69, 0, 0},       // 16 query heads per kv head: 2 groups of 8, or 16 of 1
};

TEST(DecodeAttention, AttentionDecodeMatchesReference) {
  if (!ops::detail::decode_attention_fast_unfit(64).empty())
    GTEST_SKIP() << "no fast decode kernel: " << ops::detail::decode_attention_fast_unfit(64);
  EXPECT_GT(splits_of(kDecodeCases[2]), 1) << "the cases should split a cache";
  EXPECT_GT(splits_of(kDecodeCases[6]), 1);
  EXPECT_EQ(splits_of(kDecodeCases[1]), 1);
  // By the rule (small grids: one query head per workgroup), and with the heads of a kv head
  // grouped as far as the kernel allows.
  struct Restore {
    ~Restore() { ops::detail::set_decode_heads_per_group(0); }
  } restore;
  for (const int64_t heads : {0, 8}) {
    SCOPED_TRACE("heads per workgroup " + std::to_string(heads));
    ops::detail::set_decode_heads_per_group(heads);
    const auto plan = ops::detail::decode_attention_plan(2, 70, 16, 1, 16);
    EXPECT_EQ(plan.heads_per_group, heads == 0 ? 1 : 8);
    EXPECT_EQ(plan.head_groups, heads == 0 ? 16 : 2);
    Rng rng(23);
    for (const DecodeCase& c : kDecodeCases) check_attention_decode(rng, c);
  }
  // Large grids keep the heads grouped: 8 kv heads x 64 rows already make 512 workgroups.
  ops::detail::set_decode_heads_per_group(0);
  EXPECT_EQ(ops::detail::decode_attention_plan(64, 128, 32, 8, 64).heads_per_group, 4);
  EXPECT_EQ(ops::detail::decode_attention_plan(1, 128, 32, 8, 64).heads_per_group, 1);
}

// Other keys per lane group and pass than the rule's: one, an odd count, and the largest the
// kernel takes, so that passes of every size (each prefetched while the one before is summed)
// and the split boundaries between them meet the reference.
TEST(DecodeAttention, AttentionDecodeKeysPerPass) {
  if (!ops::detail::decode_attention_fast_unfit(64).empty())
    GTEST_SKIP() << "no fast decode kernel: " << ops::detail::decode_attention_fast_unfit(64);
  struct Restore {
    ~Restore() { ops::detail::set_decode_keys_per_lane_group(0); }
  } restore;
  for (const int64_t keys : {1, 3, 8}) {
    SCOPED_TRACE("keys per lane group " + std::to_string(keys));
    ops::detail::set_decode_keys_per_lane_group(keys);
    EXPECT_EQ(ops::detail::decode_attention_plan(1, 128, 32, 8, 64).keys_per_lane_group, keys);
    Rng rng(29);
    for (const DecodeCase& c : kDecodeCases)
      if (c.d <= 64) check_attention_decode(rng, c);
  }
  test::expect_error([] { ops::detail::set_decode_keys_per_lane_group(9); },
                     {"keys per lane group"});
}

TEST(DecodeAttention, AttentionDecodePlainMatchesReference) {
  const PlainDecodeAttention plain;
  Rng rng(27);
  for (const DecodeCase& c : kDecodeCases)
    if (c.cap <= 600) check_attention_decode(rng, c);
}

TEST(DecodeAttention, AttentionDecodeBadInput) {
  const Tensor cache = Tensor::zeros({2, 8, 2, 4});
  const Tensor cached = Tensor::from_host_i32(std::vector<int32_t>{3}, {1});
  ops::AttentionOptions opts;
  opts.scale = 0.5f;
  test::expect_error(
      [&] {
        ops::attention_decode(Tensor::zeros({2, 2, 2, 4}), cache, cache, {}, cached, opts);
      },
      {"attention_decode", "q"});
  test::expect_error(
      [&] {
        ops::attention_decode(Tensor::zeros({2, 1, 3, 4}), cache, cache, {}, cached, opts);
      },
      {"multiple"});
  test::expect_error(
      [&] {
        ops::attention_decode(Tensor::zeros({2, 1, 2, 4}), cache, cache,
                              Tensor::zeros({2, 7}, DType::I32), cached, opts);
      },
      {"key_padding_mask"});
  test::expect_error(
      [&] {
        ops::attention_decode(Tensor::zeros({2, 1, 2, 4}), cache, cache, {}, Tensor::zeros({1}),
                              opts);
      },
      {"cached", "I32"});
  ops::AttentionOptions unset;
  test::expect_error(
      [&] {
        ops::attention_decode(Tensor::zeros({2, 1, 2, 4}), cache, cache, {}, cached, unset);
      },
      {"scale"});
}

TEST(DecodeAttention, RopeKvWrite) {
  Rng rng(24);
  const int64_t B = 2, cap = 7, hq = 4, hkv = 2, P = 16;
  for (const bool interleaved : {false, true}) {
    for (const int64_t D : {6, 8}) {
      const int64_t rot = D == 8 ? 6 : D;  // partial rotary: the last dims pass through
      const int64_t half = rot / 2;
      const auto q = test::as_f32(rng.uniform(static_cast<size_t>(B * hq * D)));
      const auto k = test::as_f32(rng.uniform(static_cast<size_t>(B * hkv * D)));
      const auto v = test::as_f32(rng.uniform(k.size()));
      const auto cos = test::as_f32(rng.uniform(static_cast<size_t>(P * half)));
      const auto sin = test::as_f32(rng.uniform(cos.size()));
      const std::vector<int32_t> pos = {5, 11};
      auto ck = test::as_f32(rng.uniform(static_cast<size_t>(B * cap * hkv * D))),
           cv = test::as_f32(rng.uniform(ck.size()));
      const Tensor cache_k = test::to_gpu(ck, {B, cap, hkv, D}),
                   cache_v = test::to_gpu(cv, {B, cap, hkv, D});
      const std::vector<int64_t> pos64(pos.begin(), pos.end());
      const auto q_want = ref::rope_apply(q, B, 1, hq, D, cos, sin, pos64, rot, interleaved);
      const auto k_rot = ref::rope_apply(k, B, 1, hkv, D, cos, sin, pos64, rot, interleaved);
      for (const int32_t slot : {4, 7}) {  // 7: outside the cache, nothing written
        const Tensor got_q = ops::rope_kv_write(
            test::to_gpu(q, {B, 1, hq, D}), test::to_gpu(k, {B, 1, hkv, D}),
            test::to_gpu(v, {B, 1, hkv, D}), test::to_gpu(cos, {P, half}),
            test::to_gpu(sin, {P, half}), Tensor::from_host_i32(pos, {B, 1}), cache_k, cache_v,
            Tensor::from_host_i32(std::vector<int32_t>{slot}, {1}), rot,
            interleaved ? ops::RopeLayout::Interleaved : ops::RopeLayout::RotateHalf);
        const std::string what = std::string(interleaved ? "interleaved" : "rotate-half") +
                                 " D=" + std::to_string(D) + " slot " + std::to_string(slot);
        test::expect_close(got_q, q_want, 1e-6, 1e-6, what + ": q");
        ref::kv_cache_write(ck, k_rot, B, cap, hkv * D, slot);
        ref::kv_cache_write(cv, v, B, cap, hkv * D, slot);
        test::expect_close(cache_k, ck, 1e-6, 1e-6, what + ": cached keys");
        test::expect_close(cache_v, cv, 0, 0, what + ": cached values");
      }
    }
  }
  test::expect_error(
      [] {
        const Tensor c = Tensor::zeros({1, 4, 1, 4});
        ops::rope_kv_write(Tensor::zeros({1, 1, 1, 4}), Tensor::zeros({1, 1, 1, 4}),
                           Tensor::zeros({1, 1, 1, 4}), Tensor::zeros({8, 3}),
                           Tensor::zeros({8, 3}), Tensor::zeros({1, 1}, DType::I32), c, c,
                           Tensor::zeros({1}, DType::I32), 4, ops::RopeLayout::RotateHalf);
      },
      {"rope_kv_write", "cos/sin"});
}

struct FusedCase {
  int64_t batch, cap, hq, hkv, d, rot, slot;
  int64_t window;
  float softcap;
  bool interleaved;
};

// attention_decode_rope against rope_kv_write then attention_decode (bitwise: outputs and caches)
// and against the references (ref::rope_apply, the cache write, ref::attention over the filled
// slots).
void check_attention_decode_rope(Rng& rng, const FusedCase& c, const std::string& label) {
  const int64_t P = c.slot + 5, half = c.rot / 2, row = c.hkv * c.d;
  const auto q = test::as_f32(rng.normal(static_cast<size_t>(c.batch * c.hq * c.d)));
  const auto k = test::as_f32(rng.normal(static_cast<size_t>(c.batch * row)));
  const auto v = test::as_f32(rng.normal(k.size()));
  const auto cos = test::as_f32(rng.uniform(static_cast<size_t>(P * half)));
  const auto sin = test::as_f32(rng.uniform(cos.size()));
  const auto ck = test::as_f32(rng.normal(static_cast<size_t>(c.batch * c.cap * row)));
  const auto cv = test::as_f32(rng.normal(ck.size()));
  std::vector<int32_t> pos;
  for (int64_t b = 0; b < c.batch; ++b) pos.push_back(static_cast<int32_t>((c.slot + 3 * b) % P));
  // Row 0 left-padded, holes in the others, row 2 (when present) sees no key.
  const auto mask = padding_mask(c.batch, c.cap, std::min<int64_t>(5, c.slot), 2, 7, c.cap);
  const ops::AttentionOptions opts = decode_options(c.d, c.window, c.softcap);
  const auto layout = c.interleaved ? ops::RopeLayout::Interleaved : ops::RopeLayout::RotateHalf;
  const Tensor slot =
      Tensor::from_host_i32(std::vector<int32_t>{static_cast<int32_t>(c.slot)}, {1});
  const Tensor mt = Tensor::from_host_i32(mask, {c.batch, c.cap});
  const Tensor qt = test::to_gpu(q, {c.batch, 1, c.hq, c.d}),
               kt = test::to_gpu(k, {c.batch, 1, c.hkv, c.d}),
               vt = test::to_gpu(v, {c.batch, 1, c.hkv, c.d}), cos_t = test::to_gpu(cos, {P, half}),
               sin_t = test::to_gpu(sin, {P, half}),
               pos_t = Tensor::from_host_i32(pos, {c.batch, 1});
  const Shape cache_shape{c.batch, c.cap, c.hkv, c.d};
  const Tensor two_k = test::to_gpu(ck, cache_shape), two_v = test::to_gpu(cv, cache_shape);
  const Tensor one_k = test::to_gpu(ck, cache_shape), one_v = test::to_gpu(cv, cache_shape);
  const Tensor rotated =
      ops::rope_kv_write(qt, kt, vt, cos_t, sin_t, pos_t, two_k, two_v, slot, c.rot, layout);
  const Tensor two = ops::attention_decode(rotated, two_k, two_v, mt, slot, opts);
  const Tensor one = ops::attention_decode_rope(qt, kt, vt, cos_t, sin_t, pos_t, one_k, one_v, slot,
                                                mt, opts, c.rot, layout);
  const std::string what = label + " d=" + std::to_string(c.d) + " rot=" + std::to_string(c.rot) +
                           " slot=" + std::to_string(c.slot) +
                           (c.interleaved ? " interleaved" : " rotate-half");
  test::expect_bitwise_equal(one, two, what + ": output vs rope_kv_write + attention_decode");
  test::expect_bitwise_equal(one_k, two_k, what + ": cached keys");
  test::expect_bitwise_equal(one_v, two_v, what + ": cached values");

  const std::vector<int64_t> pos64(pos.begin(), pos.end());
  const auto q_rot =
      ref::rope_apply(q, c.batch, 1, c.hq, c.d, cos, sin, pos64, c.rot, c.interleaved);
  const auto k_rot =
      ref::rope_apply(k, c.batch, 1, c.hkv, c.d, cos, sin, pos64, c.rot, c.interleaved);
  auto ck_want = ck, cv_want = cv;
  ref::kv_cache_write(ck_want, k_rot, c.batch, c.cap, row, c.slot);
  ref::kv_cache_write(cv_want, v, c.batch, c.cap, row, c.slot);
  test::expect_close(one_k, ck_want, 1e-6, 1e-6, what + ": cached keys vs reference");
  test::expect_close(one_v, cv_want, 0, 0, what + ": cached values vs reference");
  const int64_t keys = std::clamp<int64_t>(c.slot + 1, 0, c.cap);
  std::vector<double> kf, vf;
  std::vector<int64_t> mf;
  for (int64_t b = 0; b < c.batch; ++b) {
    kf.insert(kf.end(), ck_want.begin() + b * c.cap * row,
              ck_want.begin() + (b * c.cap + keys) * row);
    vf.insert(vf.end(), cv_want.begin() + b * c.cap * row,
              cv_want.begin() + (b * c.cap + keys) * row);
    mf.insert(mf.end(), mask.begin() + b * c.cap, mask.begin() + b * c.cap + keys);
  }
  test::expect_close(one,
                     ref::attention(q_rot, kf, vf, mf, {c.batch, 1, keys, c.hq, c.hkv, c.d}, opts),
                     2e-6, 2e-5, what + ": output vs reference");
}

const FusedCase kFusedCases[] = {
    {1, 9, 4, 4, 8, 6, 0, 0, 0, false},            // the first key only, partial rotary, GQA 1
    {2, 40, 4, 2, 6, 6, 17, 0, 0, true},           // odd head dim, GQA 2
    {3, 600, 2, 1, 64, 64, 560, 0, 0, false},      // five splits, a masked row
    {3, 600, 2, 1, 64, 32, 560, 0, 0, true},       // the same, interleaved and partial
    {2, 300, 4, 2, 64, 16, 200, 50, 0, true},      // sliding window, partial rotary
    {2, 64, 6, 2, 130, 128, 40, 0, 30.0f, false},  // dims past 128, soft-cap, GQA 3
    {1, 20, 2, 1, 256, 256, 19, 0, 0, true},       // the largest head dim
    {1, 1100, 8, 2, 64, 64, 1000, 0, 0, false},    // a long cache over eight splits
    {2, 12, 2, 1, 8, 8, 12, 0, 0, false},          // the slot past the cache: nothing written
};

TEST(DecodeAttention, AttentionDecodeRopeMatchesTwoKernels) {
  Rng rng(28);
  for (const FusedCase& c : kFusedCases) check_attention_decode_rope(rng, c, "fast");
  // The precise build (double accumulators, exp and tanh) on devices with fp64.
  set_math_mode(MathMode::Precise);
  check_attention_decode_rope(rng, kFusedCases[2], "precise");
  check_attention_decode_rope(rng, kFusedCases[5], "precise");
  set_math_mode(MathMode::Fast);
  // The plain path: rope_kv_write then the plain kernel.
  const PlainDecodeAttention plain;
  check_attention_decode_rope(rng, kFusedCases[1], "plain");
  check_attention_decode_rope(rng, kFusedCases[3], "plain");
}

// attention_decode_fast.comp's shared-memory loops both ways (UNIFORM_LOOPS; the rule picks one
// per device, so each device runs only one unless forced): each meets the references, the fused
// form matches the two kernels, and the two give the same bits.
TEST(DecodeAttention, SharedMemoryLoopsEitherWay) {
  if (!ops::detail::decode_attention_fast_unfit(64).empty())
    GTEST_SKIP() << "no fast decode kernel: " << ops::detail::decode_attention_fast_unfit(64);
  struct Restore {
    ~Restore() { ops::detail::set_decode_attention_uniform_loops(-1); }
  } restore;
  std::vector<std::vector<double>> outputs;
  for (const int mode : {0, 1}) {
    SCOPED_TRACE("uniform loops " + std::to_string(mode));
    ops::detail::set_decode_attention_uniform_loops(mode);
    Rng rng(31);
    for (const DecodeCase& c : kDecodeCases)
      if (c.cap <= 600) check_attention_decode(rng, c);
    for (const size_t i : {1, 2, 5}) check_attention_decode_rope(rng, kFusedCases[i], "fast");
    // The same inputs each time: head dims past 128 and a soft-cap (kDecodeCases[4]).
    const DecodeCase& c = kDecodeCases[4];
    Rng data(43);
    const Tensor q =
        test::to_gpu(test::as_f32(data.normal(static_cast<size_t>(c.batch * c.hq * c.d))),
                     {c.batch, 1, c.hq, c.d});
    const Shape cache{c.batch, c.cap, c.hkv, c.d};
    const Tensor ck = test::to_gpu(
        test::as_f32(data.normal(static_cast<size_t>(c.batch * c.cap * c.hkv * c.d))), cache);
    const Tensor cv = test::to_gpu(
        test::as_f32(data.normal(static_cast<size_t>(c.batch * c.cap * c.hkv * c.d))), cache);
    const Tensor cached =
        Tensor::from_host_i32(std::vector<int32_t>{static_cast<int32_t>(c.cached)}, {1});
    outputs.push_back(
        ops::attention_decode(q, ck, cv, {}, cached, decode_options(c.d, 0, c.softcap))
            .to_double());
  }
  test::expect_close(outputs[1], outputs[0], 0, 0, "uniform loops against the plain loops");
  test::expect_error([] { ops::detail::set_decode_attention_uniform_loops(2); }, {"uniform loops"});
}

TEST(DecodeAttention, AttentionDecodeRopeBadInput) {
  const Tensor cache = Tensor::zeros({2, 8, 2, 4});
  const Tensor slot = Tensor::from_host_i32(std::vector<int32_t>{3}, {1});
  const Tensor q = Tensor::zeros({2, 1, 4, 4}), kv = Tensor::zeros({2, 1, 2, 4});
  const Tensor table = Tensor::zeros({8, 2}), pos = Tensor::zeros({2, 1}, DType::I32);
  ops::AttentionOptions opts;
  opts.scale = 0.5f;
  const auto call = [&](const Tensor& q_, const Tensor& k_, const Tensor& cos_, const Tensor& pos_,
                        const Tensor& mask, int64_t rot, const ops::AttentionOptions& o) {
    ops::attention_decode_rope(q_, k_, kv, cos_, table, pos_, cache, cache, slot, mask, o, rot,
                               ops::RopeLayout::RotateHalf);
  };
  test::expect_error(
      [&] {
        call(q, Tensor::zeros({2, 1, 3, 4}), table, pos, {}, 4, opts);
      },
      {"attention_decode_rope", "keys"});
  test::expect_error(
      [&] {
        call(Tensor::zeros({2, 1, 3, 4}), kv, table, pos, {}, 4, opts);
      },
      {"attention_decode_rope", "multiple"});
  test::expect_error(
      [&] {
        call(q, kv, Tensor::zeros({8, 3}), pos, {}, 4, opts);
      },
      {"attention_decode_rope", "cos/sin"});
  test::expect_error([&] { call(q, kv, table, pos, {}, 3, opts); }, {"rotary_dim"});
  test::expect_error([&] { call(q, kv, table, Tensor::zeros({2}, DType::I32), {}, 4, opts); },
                     {"positions"});
  test::expect_error(
      [&] {
        call(q, kv, table, pos, Tensor::zeros({2, 7}, DType::I32), 4, opts);
      },
      {"key_padding_mask"});
  ops::AttentionOptions dropout = opts;
  dropout.dropout_p = 0.1f;
  test::expect_error([&] { call(q, kv, table, pos, {}, 4, dropout); }, {"dropout"});
}

}  // namespace
}  // namespace vkf
