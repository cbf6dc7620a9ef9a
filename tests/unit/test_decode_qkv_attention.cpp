// ops::normed_qkv_attention (matmul_skinny_f16.comp's `attend` build with
// decode_attention_tail.glsl): a decode step's q, k and v products and its attention in one
// dispatch, against the separate ops it replaces (normed_linear for each projection, then
// attention_decode_rope, which test_decode_attention.cpp checks against the CPU references):
// the attention's output and both caches bit for bit, over the head layouts of the benchmark
// shapes and of GQA 1 and MQA, head dims 16 to 128, every filled length from the first key to a
// full cache and a slot past it, padding, a sliding window, soft-capping, partial and interleaved
// rotary, the norm's 1 + w form; repeated calls on one record (its arrival counters back at zero
// after each; on lavapipe heads pass to the k and v blocks as well, the other way the kernel has);
// and the cases that keep the separate ops (qkv_attention_folds).
#include <cmath>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/decode.h"
#include "test_util.h"

namespace vkf {
namespace {

using test::Rng;

// f16 weights with values in [-scale, scale), rounded on the host.
Tensor half_matrix(Rng& rng, int64_t rows, int64_t cols, double scale) {
  const auto v = rng.uniform(static_cast<size_t>(rows * cols), -scale, scale);
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = f32_to_f16_bits(static_cast<float>(v[i]));
  return Tensor::from_bytes(bits.data(), DType::F16, {rows, cols});
}

struct QkvCase {
  int64_t hq, hkv, d, in, cap, rot;
  int64_t window;
  float softcap;
  bool interleaved, mask, one_plus;
};

struct QkvInputs {
  Tensor x, cos, sin, pos, wq, wk, wv, mask;
  ops::RowNorm norm;
  std::vector<double> cache_k, cache_v;
};

QkvInputs make_inputs(Rng& rng, const QkvCase& c) {
  QkvInputs in;
  const int64_t P = c.cap + 3, half = c.rot / 2;
  in.x = test::to_gpu(test::as_f32(rng.uniform(static_cast<size_t>(c.in), -2, 2)), {1, 1, c.in});
  in.norm = {test::to_gpu(test::as_f32(rng.uniform(static_cast<size_t>(c.in), 0.5, 1.5)), {c.in}),
             1e-5f, c.one_plus};
  // Weights scaled so that q.k stays of order one: the softmax sees a spread of scores.
  const double scale = 1.5 / static_cast<double>(c.in);
  in.wq = half_matrix(rng, c.hq * c.d, c.in, scale);
  in.wk = half_matrix(rng, c.hkv * c.d, c.in, scale * 8);
  in.wv = half_matrix(rng, c.hkv * c.d, c.in, scale * 8);
  in.cos = test::to_gpu(test::as_f32(rng.uniform(static_cast<size_t>(P * half), -1, 1)), {P, half});
  in.sin = test::to_gpu(test::as_f32(rng.uniform(static_cast<size_t>(P * half), -1, 1)), {P, half});
  in.pos = Tensor::from_host_i32(std::vector<int32_t>{0}, {1, 1});
  const size_t cache = static_cast<size_t>(c.cap * c.hkv * c.d);
  in.cache_k = test::as_f32(rng.normal(cache));
  in.cache_v = test::as_f32(rng.normal(cache));
  if (c.mask) {
    std::vector<int32_t> m(static_cast<size_t>(c.cap), 1);
    for (int64_t j = 4; j < c.cap; j += 5) m[static_cast<size_t>(j)] = 0;  // holes
    in.mask = Tensor::from_host_i32(m, {1, c.cap});
  }
  return in;
}

ops::AttentionOptions options_of(const QkvCase& c) {
  ops::AttentionOptions opts;
  opts.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d)));
  opts.sliding_window = c.window;
  opts.softcap = c.softcap;
  return opts;
}

// The fold against normed_linear three times then attention_decode_rope, at cache slot `slot`,
// each on its own copy of the caches.
void check_slot(const QkvCase& c, const QkvInputs& in, int64_t slot, const std::string& label) {
  const std::string what = label + " slot " + std::to_string(slot);
  const ops::AttentionOptions opts = options_of(c);
  const auto layout = c.interleaved ? ops::RopeLayout::Interleaved : ops::RopeLayout::RotateHalf;
  const Shape cache_shape{1, c.cap, c.hkv, c.d};
  const Tensor fold_k = test::to_gpu(in.cache_k, cache_shape),
               fold_v = test::to_gpu(in.cache_v, cache_shape);
  const Tensor two_k = test::to_gpu(in.cache_k, cache_shape),
               two_v = test::to_gpu(in.cache_v, cache_shape);
  const Tensor cached =
      Tensor::from_host_i32(std::vector<int32_t>{static_cast<int32_t>(slot)}, {1});
  in.pos.copy_(Tensor::from_host_i32(
      std::vector<int32_t>{static_cast<int32_t>((slot * 7 + 1) % (c.cap + 3))}, {1, 1}));
  ASSERT_TRUE(ops::qkv_attention_folds(in.x, in.norm, in.wq, in.wk, in.wv, fold_k, opts)) << what;
  const Tensor folded =
      ops::normed_qkv_attention(in.x, in.norm, in.wq, in.wk, in.wv, in.cos, in.sin, in.pos, fold_k,
                                fold_v, cached, in.mask, opts, c.rot, layout);
  const Tensor q = ops::normed_linear(in.x, in.norm, in.wq).reshape({1, 1, c.hq, c.d});
  const Tensor k = ops::normed_linear(in.x, in.norm, in.wk).reshape({1, 1, c.hkv, c.d});
  const Tensor v = ops::normed_linear(in.x, in.norm, in.wv).reshape({1, 1, c.hkv, c.d});
  const Tensor separate = ops::attention_decode_rope(q, k, v, in.cos, in.sin, in.pos, two_k, two_v,
                                                     cached, in.mask, opts, c.rot, layout);
  test::expect_bitwise_equal(folded, separate, what + ": the attention's output");
  test::expect_bitwise_equal(fold_k, two_k, what + ": the key cache");
  test::expect_bitwise_equal(fold_v, two_v, what + ": the value cache");
  // Not a trivial agreement: the step's output is not all zeros, and the new key was written.
  bool any = false;
  for (const double e : folded.to_double()) any = any || e != 0.0;
  EXPECT_TRUE(any) << what << ": an all-zero output";
  if (slot < c.cap) {
    const auto kd = fold_k.to_double();
    bool changed = false;
    for (int64_t e = 0; e < c.hkv * c.d; ++e) {
      const size_t i = static_cast<size_t>(slot * c.hkv * c.d + e);
      changed = changed || kd[i] != in.cache_k[i];
    }
    EXPECT_TRUE(changed) << what << ": the new key's slot";
  }
}

const QkvCase kCases[] = {
    // hq hkv  d   in  cap rot window softcap interleaved mask one_plus
    {32, 8, 64, 256, 96, 64, 0, 0, false, false, false},      // the 1B head layout
    {9, 3, 64, 576, 40, 64, 0, 0, false, false, false},       // the 135M head layout and width
    {4, 4, 32, 64, 50, 16, 0, 0, true, true, true},           // GQA 1, partial interleaved, padding
    {8, 1, 16, 128, 70, 16, 20, 0, false, false, false},      // MQA, a sliding window
    {4, 2, 128, 128, 33, 128, 0, 30.0f, false, true, false},  // two dims per lane group's lane
};

TEST(DecodeQkvAttention, MatchesTheSeparateProductsAndAttention) {
  Rng rng(71);
  for (const QkvCase& c : kCases) {
    const QkvInputs in = make_inputs(rng, c);
    const std::string label = "hq " + std::to_string(c.hq) + " hkv " + std::to_string(c.hkv) +
                              " d " + std::to_string(c.d);
    // The first key alone, one and two passes of keys, a full cache, and a slot past it.
    for (const int64_t slot : {int64_t{0}, int64_t{1}, int64_t{31}, int64_t{32}, c.cap - 1, c.cap})
      check_slot(c, in, slot, label);
  }
}

// Calls with the same inputs share one record, whose counters each dispatch must leave at zero:
// calls in a row then each complete every head (a miscount would leave a head unwritten, or
// attending before its k and v are stored).
TEST(DecodeQkvAttention, CallsInARow) {
  Rng rng(72);
  const QkvCase& c = kCases[0];
  const QkvInputs in = make_inputs(rng, c);
  const ops::AttentionOptions opts = options_of(c);
  const Shape cache_shape{1, c.cap, c.hkv, c.d};
  const Tensor fold_k = test::to_gpu(in.cache_k, cache_shape),
               fold_v = test::to_gpu(in.cache_v, cache_shape);
  const Tensor two_k = test::to_gpu(in.cache_k, cache_shape),
               two_v = test::to_gpu(in.cache_v, cache_shape);
  for (int32_t slot = 10; slot < 14; ++slot) {
    const Tensor cached = Tensor::from_host_i32(std::vector<int32_t>{slot}, {1});
    const Tensor folded = ops::normed_qkv_attention(in.x, in.norm, in.wq, in.wk, in.wv, in.cos,
                                                    in.sin, in.pos, fold_k, fold_v, cached, {},
                                                    opts, c.rot, ops::RopeLayout::RotateHalf);
    const Tensor q = ops::normed_linear(in.x, in.norm, in.wq).reshape({1, 1, c.hq, c.d});
    const Tensor k = ops::normed_linear(in.x, in.norm, in.wk).reshape({1, 1, c.hkv, c.d});
    const Tensor v = ops::normed_linear(in.x, in.norm, in.wv).reshape({1, 1, c.hkv, c.d});
    const Tensor separate =
        ops::attention_decode_rope(q, k, v, in.cos, in.sin, in.pos, two_k, two_v, cached, {}, opts,
                                   c.rot, ops::RopeLayout::RotateHalf);
    test::expect_bitwise_equal(folded, separate, "call at slot " + std::to_string(slot));
  }
  test::expect_bitwise_equal(fold_k, two_k, "the key cache after four calls");
}

TEST(DecodeQkvAttention, WhereTheSeparateOpsStay) {
  Rng rng(73);
  const QkvCase& c = kCases[0];
  const QkvInputs in = make_inputs(rng, c);
  const ops::AttentionOptions opts = options_of(c);
  const Tensor cache = Tensor::zeros({1, c.cap, c.hkv, c.d});
  ASSERT_TRUE(ops::qkv_attention_folds(in.x, in.norm, in.wq, in.wk, in.wv, cache, opts));
  // Switched off.
  ops::set_qkv_attention_fold(false);
  EXPECT_FALSE(ops::qkv_attention_folds(in.x, in.norm, in.wq, in.wk, in.wv, cache, opts));
  test::expect_error(
      [&] {
        ops::normed_qkv_attention(in.x, in.norm, in.wq, in.wk, in.wv, in.cos, in.sin, in.pos, cache,
                                  cache, Tensor::zeros({1}, DType::I32), {}, opts, c.rot,
                                  ops::RopeLayout::RotateHalf);
      },
      {"normed_qkv_attention", "qkv_attention_folds"});
  ops::set_qkv_attention_fold(true);
  // A cache long enough to be split over workgroups, two rows, f32 weights, a head dim that
  // blocks of 16 rows straddle, and dropout.
  EXPECT_FALSE(ops::qkv_attention_folds(in.x, in.norm, in.wq, in.wk, in.wv,
                                        Tensor::zeros({1, 2048, c.hkv, c.d}), opts));
  EXPECT_FALSE(ops::qkv_attention_folds(Tensor::zeros({2, 1, c.in}), in.norm, in.wq, in.wk, in.wv,
                                        Tensor::zeros({2, c.cap, c.hkv, c.d}), opts));
  const Tensor wq32 = Tensor::zeros({c.hq * c.d, c.in});
  EXPECT_FALSE(ops::qkv_attention_folds(in.x, in.norm, wq32, in.wk, in.wv, cache, opts));
  const int64_t d = 24;
  EXPECT_FALSE(ops::qkv_attention_folds(
      in.x, in.norm, half_matrix(rng, c.hq * d, c.in, 0.1), half_matrix(rng, c.hkv * d, c.in, 0.1),
      half_matrix(rng, c.hkv * d, c.in, 0.1), Tensor::zeros({1, c.cap, c.hkv, d}), opts));
  ops::AttentionOptions dropout = opts;
  dropout.dropout_p = 0.1f;
  EXPECT_FALSE(ops::qkv_attention_folds(in.x, in.norm, in.wq, in.wk, in.wv, cache, dropout));
}

}  // namespace
}  // namespace vkf
