// The decode step's o product folded into its attention, and its partials folded into the MLP's
// first product:
// - ops::attention_decode_rope_o against CPU references (ref::rope_apply, the cache write,
//   ref::attention over the filled slots, then each kv head's columns of the f16 o weight in
//   double): the 1B and 135M head layouts, o row counts that the slices do not divide, padding, a
//   row that sees no key, a sliding window, interleaved and partial rotary, the precise build;
//   the cache contents bitwise those of attention_decode_rope; determinism.
// - ops::gated_linear with addends: the staged kernel's sum (workgroup 0's store) and outputs
//   bitwise those of ops::add in addend order followed by gated_linear; the composed fallback;
//   the double reference.
// - attention_decode_o_unfit's refusals, and bad input.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/launch.h"
#include "ops/activation_ref.h"
#include "ops/attention_ref.h"
#include "ops/decode.h"
#include "ops/decode_ref.h"
#include "ops/elementwise.h"
#include "ops/matmul_ref.h"
#include "ops/norm_ref.h"
#include "ops/rope_ref.h"
#include "test_util.h"

namespace vkf {
namespace {

using test::Rng;

// f16 values rounded on the host, as doubles and as a device tensor [rows, cols].
std::pair<std::vector<double>, Tensor> half_matrix(Rng& rng, int64_t rows, int64_t cols,
                                                   double scale) {
  const auto v = rng.uniform(static_cast<size_t>(rows * cols), -scale, scale);
  std::vector<uint16_t> bits(v.size());
  std::vector<double> values(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    bits[i] = f32_to_f16_bits(static_cast<float>(v[i]));
    values[i] = f16_bits_to_f32(bits[i]);
  }
  return {values, Tensor::from_bytes(bits.data(), DType::F16, {rows, cols})};
}

struct OCase {
  int64_t batch, cap, hq, hkv, d, rot, slot, out_rows;
  int64_t window;
  bool interleaved, masked;
};

void check_attention_o(Rng& rng, const OCase& c, const std::string& label) {
  const int64_t P = c.slot + 5, half = c.rot / 2, row = c.hkv * c.d, cols = c.hq * c.d;
  const auto q = test::as_f32(rng.normal(static_cast<size_t>(c.batch * c.hq * c.d)));
  const auto k = test::as_f32(rng.normal(static_cast<size_t>(c.batch * row)));
  const auto v = test::as_f32(rng.normal(k.size()));
  const auto cos = test::as_f32(rng.uniform(static_cast<size_t>(P * half)));
  const auto sin = test::as_f32(rng.uniform(cos.size()));
  const auto ck = test::as_f32(rng.normal(static_cast<size_t>(c.batch * c.cap * row)));
  const auto cv = test::as_f32(rng.normal(ck.size()));
  const auto [wo, wo_t] = half_matrix(rng, c.out_rows, cols, 0.5);
  std::vector<int32_t> pos;
  for (int64_t b = 0; b < c.batch; ++b) pos.push_back(static_cast<int32_t>((c.slot + 3 * b) % P));
  // Row 0 left-padded, holes in row 1, row 2 (when present) sees no key.
  std::vector<int32_t> mask(static_cast<size_t>(c.batch * c.cap), 1);
  if (c.masked) {
    for (int64_t j = 0; j < std::min<int64_t>(5, c.slot); ++j) mask[static_cast<size_t>(j)] = 0;
    for (int64_t b = 1; b < c.batch; ++b)
      for (int64_t j = 2; j < c.cap; j += 7) mask[static_cast<size_t>(b * c.cap + j)] = 0;
    if (c.batch > 2)
      for (int64_t j = 0; j < c.cap; ++j) mask[static_cast<size_t>(2 * c.cap + j)] = 0;
  }
  ops::AttentionOptions opts;
  opts.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d)));
  opts.sliding_window = c.window;
  const auto layout = c.interleaved ? ops::RopeLayout::Interleaved : ops::RopeLayout::RotateHalf;
  const Tensor slot =
      Tensor::from_host_i32(std::vector<int32_t>{static_cast<int32_t>(c.slot)}, {1});
  const Tensor mt = c.masked ? Tensor::from_host_i32(mask, {c.batch, c.cap}) : Tensor();
  // The sin table right after the cos table, as the decoder's rope tables lie.
  std::vector<double> tables = cos;
  tables.insert(tables.end(), sin.begin(), sin.end());
  const Tensor table_t = test::to_gpu(tables, {2, P, half});
  const Tensor cos_t = table_t.slice(0, 0, 1).reshape({P, half});
  const Tensor sin_t = table_t.slice(0, 1, 2).reshape({P, half});
  const Tensor qt = test::to_gpu(q, {c.batch, 1, c.hq, c.d}),
               kt = test::to_gpu(k, {c.batch, 1, c.hkv, c.d}),
               vt = test::to_gpu(v, {c.batch, 1, c.hkv, c.d}),
               pos_t = Tensor::from_host_i32(pos, {c.batch, 1});
  const Shape cache_shape{c.batch, c.cap, c.hkv, c.d};
  const Tensor fused_k = test::to_gpu(ck, cache_shape), fused_v = test::to_gpu(cv, cache_shape);
  const Tensor plain_k = test::to_gpu(ck, cache_shape), plain_v = test::to_gpu(cv, cache_shape);
  const std::string what = label + " hq=" + std::to_string(c.hq) + " hkv=" + std::to_string(c.hkv) +
                           " d=" + std::to_string(c.d) + " rows=" + std::to_string(c.out_rows) +
                           " slot=" + std::to_string(c.slot);
  ASSERT_EQ(ops::attention_decode_o_unfit(qt, fused_k, cos_t, sin_t, c.rot, wo_t), "") << what;
  const Tensor partials = ops::attention_decode_rope_o(
      qt, kt, vt, cos_t, sin_t, pos_t, fused_k, fused_v, slot, mt, opts, c.rot, layout, wo_t);
  ASSERT_EQ(partials.shape(), (Shape{c.batch, c.hkv, c.out_rows})) << what;
  ops::attention_decode_rope(qt, kt, vt, cos_t, sin_t, pos_t, plain_k, plain_v, slot, mt, opts,
                             c.rot, layout);
  test::expect_bitwise_equal(fused_k, plain_k, what + ": cached keys");
  test::expect_bitwise_equal(fused_v, plain_v, what + ": cached values");

  // The reference: rotate, write the cache, attend over the filled slots, then each kv head's
  // columns of o in double.
  const std::vector<int64_t> pos64(pos.begin(), pos.end());
  const auto q_rot =
      ref::rope_apply(q, c.batch, 1, c.hq, c.d, cos, sin, pos64, c.rot, c.interleaved);
  const auto k_rot =
      ref::rope_apply(k, c.batch, 1, c.hkv, c.d, cos, sin, pos64, c.rot, c.interleaved);
  auto ck_want = ck, cv_want = cv;
  ref::kv_cache_write(ck_want, k_rot, c.batch, c.cap, row, c.slot);
  ref::kv_cache_write(cv_want, v, c.batch, c.cap, row, c.slot);
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
  const auto a = ref::attention(q_rot, kf, vf, c.masked ? mf : std::vector<int64_t>{},
                                {c.batch, 1, keys, c.hq, c.hkv, c.d}, opts);
  const int64_t group_cols = cols / c.hkv;
  std::vector<double> want(static_cast<size_t>(c.batch * c.hkv * c.out_rows));
  double scale = 0;  // the largest sum of |w a| of a partial: the f32 error bound's scale
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.hkv; ++h)
      for (int64_t n = 0; n < c.out_rows; ++n) {
        double s = 0, s_abs = 0;
        for (int64_t col = h * group_cols; col < (h + 1) * group_cols; ++col) {
          const double t =
              wo[static_cast<size_t>(n * cols + col)] * a[static_cast<size_t>(b * cols + col)];
          s += t;
          s_abs += std::abs(t);
        }
        want[static_cast<size_t>((b * c.hkv + h) * c.out_rows + n)] = s;
        scale = std::max(scale, s_abs);
      }
  // The attention's own error (2e-6 relative per output) carried through |w| <= 0.5 over
  // group_cols terms, plus f32 sums over those terms.
  const double atol =
      (2e-6 * 0.5 + 4.0 * std::ldexp(1.0, -24) * scale) * static_cast<double>(group_cols) + 1e-6;
  test::expect_close(partials, want, atol, 1e-5, what + ": partials vs reference");
  // Their sum is a W_o^T.
  std::vector<double> summed(static_cast<size_t>(c.batch * c.out_rows), 0.0);
  const auto got = partials.to_double();
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.hkv; ++h)
      for (int64_t n = 0; n < c.out_rows; ++n)
        summed[static_cast<size_t>(b * c.out_rows + n)] +=
            got[static_cast<size_t>((b * c.hkv + h) * c.out_rows + n)];
  test::expect_close(summed, ref::linear(a, wo, {}, c.batch, cols, c.out_rows),
                     atol * static_cast<double>(c.hkv), 1e-5, what + ": summed vs a W_o^T");
  if (c.batch > 2 && c.masked) {  // row 2 sees no key: zero attention, zero partials
    for (int64_t i = 2 * c.hkv * c.out_rows; i < 3 * c.hkv * c.out_rows; ++i)
      EXPECT_EQ(got[static_cast<size_t>(i)], 0.0) << what << ": the keyless row, entry " << i;
  }
  // Deterministic: the same bits from the same inputs (the new slot rewritten with the same
  // values).
  const Tensor again = ops::attention_decode_rope_o(qt, kt, vt, cos_t, sin_t, pos_t, fused_k,
                                                    fused_v, slot, mt, opts, c.rot, layout, wo_t);
  test::expect_bitwise_equal(partials, again, what + " (twice)");
}

const OCase kOCases[] = {
    // batch, cap, hq, hkv, d, rot, slot, out rows, window, interleaved, masked
    {1, 96, 32, 8, 64, 64, 60, 2048, 0, false, false},  // the 1B layout: 8 x 32 workgroups
    {1, 96, 9, 3, 64, 64, 95, 576, 0, false, true},     // the 135M layout, the last slot
    {3, 40, 4, 2, 16, 8, 30, 50, 0, true, true},        // rows the slices do not divide, no-key row
    {2, 70, 4, 4, 8, 8, 0, 37, 0, false, false},        // the first key only, GQA 1
    {2, 200, 8, 1, 64, 32, 150, 100, 60, true, true},   // 8 heads per kv head, a window
};

TEST(DecodeFusedO, AttentionWithOProductMatchesReference) {
  if (const std::string why = ops::detail::decode_attention_fast_unfit(64); !why.empty())
    GTEST_SKIP() << "no fast decode kernel: " << why;
  Rng rng(61);
  for (const OCase& c : kOCases) check_attention_o(rng, c, "fast");
  struct Restore {
    ~Restore() {
      set_math_mode(MathMode::Fast);
      ops::detail::set_decode_attention_uniform_loops(-1);
    }
  } restore;
  // The precise build (double accumulators), and the uniform shared-memory loops.
  set_math_mode(MathMode::Precise);
  check_attention_o(rng, kOCases[2], "precise");
  set_math_mode(MathMode::Fast);
  ops::detail::set_decode_attention_uniform_loops(1);
  check_attention_o(rng, kOCases[1], "uniform loops");
}

TEST(DecodeFusedO, Refusals) {
  Rng rng(62);
  const Tensor q = Tensor::zeros({1, 1, 4, 8}), cache = Tensor::zeros({1, 8, 2, 8});
  const Tensor table = Tensor::zeros({2, 8, 4});
  const Tensor cos = table.slice(0, 0, 1).reshape({8, 4}),
               sin = table.slice(0, 1, 2).reshape({8, 4});
  const Tensor wo = half_matrix(rng, 16, 32, 1).second;
  // A sin table elsewhere, an f32 or misshaped weight, a split cache, heads that do not fit.
  EXPECT_NE(ops::attention_decode_o_unfit(q, cache, cos, Tensor::zeros({8, 4}), 8, wo), "");
  EXPECT_NE(ops::attention_decode_o_unfit(q, cache, cos, sin, 8, Tensor::zeros({16, 32})), "");
  EXPECT_NE(
      ops::attention_decode_o_unfit(q, cache, cos, sin, 8, half_matrix(rng, 16, 24, 1).second), "");
  EXPECT_NE(ops::attention_decode_o_unfit(q, Tensor::zeros({1, 4096, 2, 8}), cos, sin, 8, wo), "");
  EXPECT_NE(ops::attention_decode_o_unfit(Tensor::zeros({1, 1, 32, 8}), Tensor::zeros({1, 8, 1, 8}),
                                          cos, sin, 8, half_matrix(rng, 16, 256, 1).second),
            "");
  // Asked anyway, the op says why.
  test::expect_error(
      [&] {
        ops::AttentionOptions opts;
        opts.scale = 0.5f;
        const Tensor kv = Tensor::zeros({1, 1, 2, 8});
        ops::attention_decode_rope_o(q, kv, kv, cos, sin, Tensor::zeros({1, 1}, DType::I32), cache,
                                     Tensor::zeros({1, 8, 2, 8}),
                                     Tensor::from_host_i32(std::vector<int32_t>{2}, {1}), {}, opts,
                                     8, ops::RopeLayout::RotateHalf, Tensor::zeros({16, 32}));
      },
      {"attention_decode_rope_o", "not available"});
}

// gated_linear with addends: x + addends in order, normalized, both products and the activation;
// the sum stored for the caller.
TEST(DecodeFusedO, GatedLinearAddsItsAddends) {
  Rng rng(63);
  for (const auto& [in, count, one_plus] :
       {std::tuple<int64_t, int64_t, bool>{64, 1, false}, {576, 3, true}, {2048, 8, false}}) {
    const int64_t inner = 3 * in / 2 + 5;
    const std::string what = "in " + std::to_string(in) + " addends " + std::to_string(count);
    const auto x = test::as_f32(rng.uniform(static_cast<size_t>(in), -2, 2));
    const auto adds = test::as_f32(rng.uniform(static_cast<size_t>(count * in), -1, 1));
    const auto nw = test::as_f32(rng.uniform(static_cast<size_t>(in), 0.5, 1.5));
    const auto [w, wt] = half_matrix(rng, inner, in, 1.0);
    const auto [u, ut] = half_matrix(rng, inner, in, 1.0);
    const ops::RowNorm norm{test::to_gpu(nw, {in}), 1e-5f, one_plus};
    const Tensor xt = test::to_gpu(x, {1, 1, in}), at = test::to_gpu(adds, {count, in});
    EXPECT_TRUE(ops::gated_linear_takes_addends(xt, wt, norm)) << what;
    Tensor sum;
    const Tensor got = ops::gated_linear(xt, wt, ut, ops::Activation::SiLU, &norm, at, &sum);
    ASSERT_EQ(sum.shape(), xt.shape()) << what;
    // The composed form: ops::add in addend order, then gated_linear on the stored sum.
    Tensor composed = xt;
    for (int64_t e = 0; e < count; ++e)
      composed = ops::add(composed, at.slice(0, e, e + 1).reshape({1, 1, in}));
    test::expect_bitwise_equal(sum, composed, what + ": sum vs ops::add");
    test::expect_bitwise_equal(got,
                               ops::gated_linear(composed, wt, ut, ops::Activation::SiLU, &norm),
                               what + ": vs gated_linear of the sum");
    // The double reference.
    std::vector<double> total = x;
    for (int64_t e = 0; e < count; ++e)
      for (int64_t i = 0; i < in; ++i)
        total[static_cast<size_t>(i)] += adds[static_cast<size_t>(e * in + i)];
    test::expect_close(sum, total, 1e-6, 1e-6, what + ": sum vs reference");
    const auto xn = ref::rms_norm(total, nw, 1, in, 1e-5, one_plus);
    const double atol = 4.0 * 3.0 * static_cast<double>(in) * std::ldexp(1.0, -24) + 1e-5;
    test::expect_close(got,
                       ref::gated(ops::Activation::SiLU, ref::linear(xn, w, {}, 1, in, inner),
                                  ref::linear(xn, u, {}, 1, in, inner)),
                       atol, 1e-4, what + ": vs reference");
  }
  // The fallback (f32 weights: no fold): the same sum, then the composed product.
  const int64_t in = 32, inner = 20;
  const auto x = test::as_f32(rng.uniform(static_cast<size_t>(in), -2, 2));
  const auto adds = test::as_f32(rng.uniform(static_cast<size_t>(2 * in), -1, 1));
  const auto nw = test::as_f32(rng.uniform(static_cast<size_t>(in), 0.5, 1.5));
  const Tensor wt =
      test::to_gpu(test::as_f32(rng.uniform(static_cast<size_t>(inner * in))), {inner, in});
  const ops::RowNorm norm{test::to_gpu(nw, {in}), 1e-5f, false};
  const Tensor xt = test::to_gpu(x, {1, in}), at = test::to_gpu(adds, {2, in});
  EXPECT_FALSE(ops::gated_linear_takes_addends(xt, wt, norm));
  Tensor sum;
  const Tensor got = ops::gated_linear(xt, wt, wt, ops::Activation::GELUTanh, &norm, at, &sum);
  const Tensor composed = ops::add(ops::add(xt, at.slice(0, 0, 1).reshape({1, in})),
                                   at.slice(0, 1, 2).reshape({1, in}));
  test::expect_bitwise_equal(sum, composed, "fallback: sum");
  test::expect_bitwise_equal(
      got, ops::gated_linear(composed, wt, wt, ops::Activation::GELUTanh, &norm), "fallback");
  // Bad input: addends of another width, several rows of x, no tensor for the sum.
  test::expect_error(
      [&] {
        ops::gated_linear(xt, wt, wt, ops::Activation::SiLU, &norm, Tensor::zeros({2, 8}), &sum);
      },
      {"gated_linear", "addends"});
  test::expect_error(
      [&] {
        ops::gated_linear(Tensor::zeros({2, in}), wt, wt, ops::Activation::SiLU, &norm, at, &sum);
      },
      {"gated_linear", "one row"});
  test::expect_error([&] { ops::gated_linear(xt, wt, wt, ops::Activation::SiLU, &norm, at); },
                     {"gated_linear", "sum"});
}

}  // namespace
}  // namespace vkf
