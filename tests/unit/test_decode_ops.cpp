// The decode ops against their CPU references: argmax_rows (ties to the first index, NaN, short
// and long rows, the strided last position of [B, T, V] logits), kv_cache_write (slot read on the
// device, a slot outside the cache writes nothing), and attention_decode against ref::attention
// over the filled slots (GQA, padding, sliding window, soft-cap, several key chunks, head dims
// from 6 to 256, a row that sees no key); determinism; bad input.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ops/attention_ref.h"
#include "ops/decode.h"
#include "ops/decode_ref.h"
#include "test_util.h"

namespace vkf {
namespace {

using test::Rng;

TEST(DecodeOps, ArgmaxRows) {
  Rng rng(21);
  for (const int64_t cols : {1, 7, 256, 1000, 4099}) {
    const int64_t rows = 4;
    auto x = test::as_f32(rng.uniform(static_cast<size_t>(rows * cols), -3, 3));
    if (cols > 10) {
      // Row 1: the maximum twice (the first wins); row 2: a NaN (wins, as in torch.argmax).
      x[static_cast<size_t>(cols + 5)] = x[static_cast<size_t>(cols + cols - 2)] = 10.0;
      x[static_cast<size_t>(2 * cols + cols / 2)] = std::numeric_limits<double>::quiet_NaN();
    }
    const auto got = ops::argmax_rows(test::to_gpu(x, {rows, cols})).to_int();
    const auto want = ref::argmax_rows(x, rows, cols);
    for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], want[static_cast<size_t>(r)]) << "cols " << cols << " row " << r;
    if (cols > 10) {
      EXPECT_EQ(want[1], 5);
      EXPECT_EQ(want[2], cols / 2);
    }
  }
  // The last position of [B, T, V] logits, read in place.
  const auto logits = test::as_f32(rng.uniform(3 * 4 * 50));
  const Tensor t = test::to_gpu(logits, {3, 4, 50});
  std::vector<double> last;
  for (int b = 0; b < 3; ++b)
    last.insert(last.end(), logits.begin() + (b * 4 + 3) * 50, logits.begin() + (b * 4 + 4) * 50);
  const auto got = ops::argmax_rows(t.slice(1, 3, 4)).to_int();
  const auto want = ref::argmax_rows(last, 3, 50);
  for (int b = 0; b < 3; ++b) EXPECT_EQ(got[static_cast<size_t>(b)], want[static_cast<size_t>(b)]) << "row " << b;
  test::expect_error([] { ops::argmax_rows(Tensor::zeros({2, 3}, DType::I32)); }, {"argmax_rows", "f32"});
  test::expect_error([] { ops::argmax_rows(Tensor::zeros({2, 3, 4})); }, {"one position per row"});
}

TEST(DecodeOps, KvCacheWrite) {
  Rng rng(22);
  const int64_t B = 2, cap = 5, H = 3, D = 4, row = H * D;
  auto ck = rng.uniform(static_cast<size_t>(B * cap * row)), cv = rng.uniform(ck.size());
  const auto k = rng.uniform(static_cast<size_t>(B * row)), v = rng.uniform(k.size());
  const Tensor cache_k = test::to_gpu(ck, {B, cap, H, D}), cache_v = test::to_gpu(cv, {B, cap, H, D});
  for (const int32_t slot : {3, 0, 7, -1}) {
    ops::kv_cache_write(test::to_gpu(k, {B, 1, H, D}), test::to_gpu(v, {B, 1, H, D}), cache_k, cache_v,
                        Tensor::from_host_i32(std::vector<int32_t>{slot}, {1}));
    ref::kv_cache_write(ck, test::as_f32(k), B, cap, row, slot);
    ref::kv_cache_write(cv, test::as_f32(v), B, cap, row, slot);
    test::expect_close(cache_k, test::as_f32(ck), 0, 0, "keys, slot " + std::to_string(slot));
    test::expect_close(cache_v, test::as_f32(cv), 0, 0, "values, slot " + std::to_string(slot));
  }
  test::expect_error([&] {
    ops::kv_cache_write(Tensor::zeros({B, 2, H, D}), Tensor::zeros({B, 1, H, D}), cache_k, cache_v,
                        Tensor::from_host_i32(std::vector<int32_t>{0}, {1}));
  }, {"kv_cache_write", "keys"});
}

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
  std::vector<int32_t> mask(static_cast<size_t>(c.batch * c.cap), 1);
  for (int64_t j = 0; j < std::min<int64_t>(7, keys); ++j) mask[static_cast<size_t>(j)] = 0;
  for (int64_t b = 1; b < c.batch; ++b)
    for (int64_t j = 3; j < keys; j += 11) mask[static_cast<size_t>(b * c.cap + j)] = 0;
  if (c.batch > 2)
    for (int64_t j = 0; j < c.cap; ++j) mask[static_cast<size_t>(2 * c.cap + j)] = 0;
  ops::AttentionOptions opts;
  opts.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d)));
  opts.sliding_window = c.window;
  opts.softcap = c.softcap;
  const Tensor cached = Tensor::from_host_i32(std::vector<int32_t>{static_cast<int32_t>(c.cached)}, {1});
  const Tensor ck = test::to_gpu(k, {c.batch, c.cap, c.hkv, c.d}), cv = test::to_gpu(v, {c.batch, c.cap, c.hkv, c.d});
  const Tensor mt = Tensor::from_host_i32(mask, {c.batch, c.cap});
  const Tensor got = ops::attention_decode(test::to_gpu(q, {c.batch, 1, c.hq, c.d}), ck, cv, mt, cached, opts);
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
  const std::string what = "d=" + std::to_string(c.d) + " keys=" + std::to_string(keys) + " window=" +
                           std::to_string(c.window) + " softcap=" + std::to_string(c.softcap);
  test::expect_close(got, want, 2e-6, 2e-5, what);
  // Deterministic, and without a mask every slot is a token.
  const Tensor again = ops::attention_decode(test::to_gpu(q, {c.batch, 1, c.hq, c.d}), ck, cv, mt, cached, opts);
  test::expect_bitwise_equal(got, again, what + " (twice)");
  const auto no_mask = ref::attention(q, kf, vf, {}, {c.batch, 1, keys, c.hq, c.hkv, c.d}, opts);
  test::expect_close(ops::attention_decode(test::to_gpu(q, {c.batch, 1, c.hq, c.d}), ck, cv, {}, cached, opts),
                     no_mask, 2e-6, 2e-5, what + " without a mask");
}

TEST(DecodeOps, AttentionDecodeMatchesReference) {
  Rng rng(23);
  check_attention_decode(rng, {1, 9, 4, 2, 6, 0, 0, 0});           // the first key only
  check_attention_decode(rng, {2, 40, 4, 2, 6, 17, 0, 0});         // odd head dim, GQA
  check_attention_decode(rng, {3, 300, 2, 1, 64, 260, 0, 0});      // three key chunks, a masked row
  check_attention_decode(rng, {2, 300, 4, 4, 32, 200, 50, 0});     // sliding window
  check_attention_decode(rng, {2, 64, 2, 2, 130, 40, 0, 30.0f});   // dims past 128, soft-cap
  check_attention_decode(rng, {1, 20, 2, 1, 256, 19, 0, 0});       // the largest head dim
}

TEST(DecodeOps, AttentionDecodeBadInput) {
  const Tensor cache = Tensor::zeros({2, 8, 2, 4});
  const Tensor cached = Tensor::from_host_i32(std::vector<int32_t>{3}, {1});
  ops::AttentionOptions opts;
  opts.scale = 0.5f;
  test::expect_error([&] { ops::attention_decode(Tensor::zeros({2, 2, 2, 4}), cache, cache, {}, cached, opts); },
                     {"attention_decode", "q"});
  test::expect_error([&] { ops::attention_decode(Tensor::zeros({2, 1, 3, 4}), cache, cache, {}, cached, opts); },
                     {"multiple"});
  test::expect_error([&] {
    ops::attention_decode(Tensor::zeros({2, 1, 2, 4}), cache, cache, Tensor::zeros({2, 7}, DType::I32), cached, opts);
  }, {"key_padding_mask"});
  test::expect_error([&] {
    ops::attention_decode(Tensor::zeros({2, 1, 2, 4}), cache, cache, {}, Tensor::zeros({1}), opts);
  }, {"cached", "I32"});
  ops::AttentionOptions unset;
  test::expect_error([&] { ops::attention_decode(Tensor::zeros({2, 1, 2, 4}), cache, cache, {}, cached, unset); },
                     {"scale"});
}

}  // namespace
}  // namespace vkf
