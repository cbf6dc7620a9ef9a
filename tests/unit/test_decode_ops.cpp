// The decode ops other than the attention (test_decode_attention.cpp) against their CPU
// references: argmax_rows (ties to the first index, NaN, short and long rows, the strided last
// position of [B, T, V] logits), kv_cache_write (slot read on the device, a slot outside the
// cache writes nothing), linear_accumulate (f32 and f16 weights; the early epilogue reads, bit for
// bit) and gated_linear (fused kernel with 16-byte and scalar loads, and the composed fallback)
// against ref::linear / ref::gated; normed_linear and gated_linear with a folded RMSNorm (bit for
// bit rms_norm then the product, and close to ref::rms_norm then ref::linear / ref::gated;
// 16-byte and scalar loads, 1 to 8 rows, norm rows of 8 to 256 threads, 1 + w, bias, several
// weight rows per thread, one row folded and several composed, the precise fallback), the greedy
// choice from the head's product; determinism; bad input.
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/launch.h"
#include "ops/activation_ref.h"
#include "ops/decode.h"
#include "ops/decode_ref.h"
#include "ops/elementwise.h"
#include "ops/embed.h"
#include "ops/matmul.h"
#include "ops/matmul_kernels.h"
#include "ops/matmul_ref.h"
#include "ops/norm.h"
#include "ops/norm_ref.h"
#include "test_util.h"
#include "vk/context.h"

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
    for (int64_t r = 0; r < rows; ++r)
      EXPECT_EQ(got[static_cast<size_t>(r)], want[static_cast<size_t>(r)])
          << "cols " << cols << " row " << r;
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
  for (int b = 0; b < 3; ++b)
    EXPECT_EQ(got[static_cast<size_t>(b)], want[static_cast<size_t>(b)]) << "row " << b;
  test::expect_error(
      [] {
        ops::argmax_rows(Tensor::zeros({2, 3}, DType::I32));
      },
      {"argmax_rows", "f32"});
  test::expect_error([] { ops::argmax_rows(Tensor::zeros({2, 3, 4})); }, {"one position per row"});
}

TEST(DecodeOps, KvCacheWrite) {
  Rng rng(22);
  const int64_t B = 2, cap = 5, H = 3, D = 4, row = H * D;
  auto ck = rng.uniform(static_cast<size_t>(B * cap * row)), cv = rng.uniform(ck.size());
  const auto k = rng.uniform(static_cast<size_t>(B * row)), v = rng.uniform(k.size());
  const Tensor cache_k = test::to_gpu(ck, {B, cap, H, D}),
               cache_v = test::to_gpu(cv, {B, cap, H, D});
  for (const int32_t slot : {3, 0, 7, -1}) {
    ops::kv_cache_write(test::to_gpu(k, {B, 1, H, D}), test::to_gpu(v, {B, 1, H, D}), cache_k,
                        cache_v, Tensor::from_host_i32(std::vector<int32_t>{slot}, {1}));
    ref::kv_cache_write(ck, test::as_f32(k), B, cap, row, slot);
    ref::kv_cache_write(cv, test::as_f32(v), B, cap, row, slot);
    test::expect_close(cache_k, test::as_f32(ck), 0, 0, "keys, slot " + std::to_string(slot));
    test::expect_close(cache_v, test::as_f32(cv), 0, 0, "values, slot " + std::to_string(slot));
  }
  test::expect_error(
      [&] {
        ops::kv_cache_write(Tensor::zeros({B, 2, H, D}), Tensor::zeros({B, 1, H, D}), cache_k,
                            cache_v, Tensor::from_host_i32(std::vector<int32_t>{0}, {1}));
      },
      {"kv_cache_write", "keys"});
}

// f16 weights rounded on the host, as doubles and as a device tensor.
std::pair<std::vector<double>, Tensor> half_weights(Rng& rng, int64_t rows, int64_t cols) {
  const auto v = rng.uniform(static_cast<size_t>(rows * cols));
  std::vector<uint16_t> bits(v.size());
  std::vector<double> values(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    bits[i] = f32_to_f16_bits(static_cast<float>(v[i]));
    values[i] = f16_bits_to_f32(bits[i]);
  }
  return {values, Tensor::from_bytes(bits.data(), DType::F16, {rows, cols})};
}

TEST(DecodeOps, LinearAccumulate) {
  Rng rng(25);
  for (const bool half : {false, true}) {
    // in = 8192: one activation row's weight rows split over several thread groups (the down
    // projection's form), each group's slice summed apart and the slices added in order.
    for (const auto& [rows, in] :
         {std::pair<int64_t, int64_t>{1, 40}, {3, 40}, {12, 40}, {1, 8192}}) {
      const int64_t out = 21;
      const auto x = test::as_f32(rng.uniform(static_cast<size_t>(rows * in)));
      const auto r = test::as_f32(rng.uniform(static_cast<size_t>(rows * out)));
      const auto b = test::as_f32(rng.uniform(static_cast<size_t>(out)));
      std::vector<double> w;
      Tensor wt;
      if (half) {
        std::tie(w, wt) = half_weights(rng, out, in);
      } else {
        w = test::as_f32(rng.uniform(static_cast<size_t>(out * in)));
        wt = test::to_gpu(w, {out, in});
      }
      const Tensor acc = test::to_gpu(r, {rows, 1, out});
      ops::linear_accumulate(test::to_gpu(x, {rows, 1, in}), wt, test::to_gpu(b, {out}), acc);
      auto want = ref::linear(x, w, b, rows, in, out);
      for (size_t i = 0; i < want.size(); ++i) want[i] += r[i];
      test::expect_close(acc, want, 2e-5, 1e-5,
                         std::string(half ? "f16" : "f32") + " rows " + std::to_string(rows));
    }
  }
  test::expect_error(
      [] {
        ops::linear_accumulate(Tensor::zeros({2, 4}), Tensor::zeros({3, 4}), {},
                               Tensor::zeros({2, 4}));
      },
      {"linear_accumulate", "out"});
}

// The early epilogue reads (set_skinny_f16_early_epilogue) give the same bits as the epilogue's
// own: one activation row into a residual (beta 1) and with a bias, one and two weight rows per
// thread, split rows (in = 2048, 8192), and grids of one workgroup per block or fewer (the block
// loop, where each next block's values are read after the stores of the one before).
TEST(DecodeOps, SkinnyEarlyEpilogue) {
  struct Restore {
    ~Restore() { ops::detail::reset_skinny_f16_settings(); }
  } restore;
  Rng rng(35);
  for (const auto& [in, out] : {std::pair<int64_t, int64_t>{40, 21}, {2048, 300}, {8192, 70}}) {
    const auto x = test::as_f32(rng.uniform(static_cast<size_t>(in)));
    const auto r = test::as_f32(rng.uniform(static_cast<size_t>(out)));
    const auto b = test::as_f32(rng.uniform(static_cast<size_t>(out)));
    const auto [w, wt] = half_weights(rng, out, in);
    const Tensor xt = test::to_gpu(x, {1, 1, in}), bt = test::to_gpu(b, {out});
    for (const std::optional<uint32_t> groups : {std::optional<uint32_t>{}, {3u}}) {
      const std::string what = "in " + std::to_string(in) + (groups ? ", 3 workgroups" : "");
      ops::detail::set_skinny_f16_max_groups(groups);
      Tensor acc[2], plain[2];
      for (const bool early : {false, true}) {
        ops::detail::set_skinny_f16_early_epilogue(early);
        acc[early] = test::to_gpu(r, {1, 1, out});
        ops::linear_accumulate(xt, wt, bt, acc[early]);
        plain[early] = ops::linear(xt, wt, bt);
      }
      test::expect_bitwise_equal(acc[1], acc[0], what + " into a residual");
      test::expect_bitwise_equal(plain[1], plain[0], what + " with a bias");
      auto want = ref::linear(x, w, b, 1, in, out);
      test::expect_close(plain[1], want, 2e-5, 1e-5, what + " against the reference");
    }
  }
}

TEST(DecodeOps, GatedLinear) {
  Rng rng(26);
  // (activation, rows, in): 9 rows take two products and gated_act; in = 37 reads halves one by
  // one.
  const std::tuple<ops::Activation, int64_t, int64_t> cases[] = {
      {ops::Activation::SiLU, 1, 48},
      {ops::Activation::SiLU, 1, 37},
      {ops::Activation::SiLU, 9, 48},
      {ops::Activation::GELUTanh, 3, 48}};
  for (const auto& [act, rows, in] : cases) {
    const int64_t inner = 19;
    const auto x = test::as_f32(rng.uniform(static_cast<size_t>(rows * in), -2, 2));
    const auto [wg, wgt] = half_weights(rng, inner, in);
    const auto [wu, wut] = half_weights(rng, inner, in);
    const Tensor got = ops::gated_linear(test::to_gpu(x, {rows, 1, in}), wgt, wut, act);
    EXPECT_EQ(got.shape(), (Shape{rows, 1, inner}));
    const auto want = ref::gated(act, ref::linear(x, wg, {}, rows, in, inner),
                                 ref::linear(x, wu, {}, rows, in, inner));
    const std::string what = "act " + std::to_string(static_cast<int>(act)) + " rows " +
                             std::to_string(rows) + " in " + std::to_string(in);
    test::expect_close(got, want, 1e-5, 1e-5, what);
    // The composed path on the same f16 weights: same products, same formula.
    const Tensor composed = ops::gated_act(ops::linear(test::to_gpu(x, {rows, 1, in}), wgt),
                                           ops::linear(test::to_gpu(x, {rows, 1, in}), wut), act);
    test::expect_close(got, composed.to_double(), 1e-6, 1e-6, what + " vs linear + gated_act");
  }
  // Several weight rows per thread: the same sums, bit for bit.
  {
    const int64_t rows = 8, in = 48, inner = 70;
    const auto x = test::as_f32(rng.uniform(static_cast<size_t>(rows * in), -2, 2));
    const auto [wg, wgt] = half_weights(rng, inner, in);
    const auto [wu, wut] = half_weights(rng, inner, in);
    std::vector<double> one_row;
    for (const uint32_t rpt : {1u, 2u, 4u}) {
      for (const uint32_t groups : {0u, 1u, 3u}) {  // workgroups taking several blocks of rows
        // Odd groups: the shared-memory trees where shuffles could end them (the same bits).
        ops::detail::set_skinny_f16_shuffle_tree(groups % 2 == 0);
        ops::detail::set_skinny_f16_rows_per_thread(rpt);
        ops::detail::set_skinny_f16_max_groups(groups);
        const auto got =
            ops::gated_linear(test::to_gpu(x, {rows, 1, in}), wgt, wut, ops::Activation::SiLU)
                .to_double();
        if (rpt == 1 && groups == 0) one_row = got;
        EXPECT_EQ(got, one_row) << rpt << " rows per thread, " << groups << " workgroups at most";
      }
    }
    ops::detail::reset_skinny_f16_settings();
  }
  // f32 weights take the composed path.
  const auto x = test::as_f32(rng.uniform(2 * 8));
  const auto w = test::as_f32(rng.uniform(3 * 8)), u = test::as_f32(rng.uniform(3 * 8));
  test::expect_close(ops::gated_linear(test::to_gpu(x, {2, 8}), test::to_gpu(w, {3, 8}),
                                       test::to_gpu(u, {3, 8}), ops::Activation::SiLU),
                     ref::gated(ops::Activation::SiLU, ref::linear(x, w, {}, 2, 8, 3),
                                ref::linear(x, u, {}, 2, 8, 3)),
                     1e-5, 1e-5, "f32 weights");
  test::expect_error(
      [] {
        ops::gated_linear(Tensor::zeros({2, 8}), Tensor::zeros({3, 8}), Tensor::zeros({4, 8}),
                          ops::Activation::SiLU);
      },
      {"gated_linear", "one shape"});
}

// x [rows, 1, in] on the GPU, optionally starting one element into its buffer (4 bytes: the rows
// are then not 16-byte aligned and the kernels read scalars).
Tensor rows_on_gpu(const std::vector<double>& x, int64_t rows, int64_t in, bool misaligned) {
  if (!misaligned) return test::to_gpu(x, {rows, 1, in});
  std::vector<double> padded(x.size() + 1, 0.0);
  std::copy(x.begin(), x.end(), padded.begin() + 1);
  return test::to_gpu(padded, {static_cast<int64_t>(padded.size())})
      .slice(0, 1, static_cast<int64_t>(padded.size()))
      .reshape({rows, 1, in});
}

TEST(DecodeOps, NormedLinear) {
  Rng rng(27);
  // (rows, in, one_plus, bias, misaligned): in 48 sums each norm row over 8 threads, 2048 over 256;
  // one row folds the norm in (norm_folds), several take rms_norm and then the product.
  const std::tuple<int64_t, int64_t, bool, bool, bool> cases[] = {
      {1, 48, false, false, false}, {1, 64, true, true, false},  {1, 2048, false, false, false},
      {1, 40, true, false, true},   {1, 2048, true, true, true}, {3, 64, true, true, false},
      {8, 48, false, true, false}};
  for (const auto& [rows, in, one_plus, with_bias, misaligned] : cases) {
    const int64_t out = 37;
    const std::string what = "rows " + std::to_string(rows) + " in " + std::to_string(in) +
                             (one_plus ? " 1+w" : "") + (with_bias ? " bias" : "") +
                             (misaligned ? " misaligned" : "");
    const auto x = test::as_f32(rng.uniform(static_cast<size_t>(rows * in), -3, 3));
    const auto nw = test::as_f32(rng.uniform(static_cast<size_t>(in), 0.5, 1.5));
    const auto b =
        with_bias ? test::as_f32(rng.uniform(static_cast<size_t>(out))) : std::vector<double>{};
    const auto [w, wt] = half_weights(rng, out, in);
    const auto [u, ut] = half_weights(rng, out, in);
    const ops::RowNorm norm{test::to_gpu(nw, {in}), 1e-5f, one_plus};
    const Tensor xt = rows_on_gpu(x, rows, in, misaligned);
    const Tensor bt = with_bias ? test::to_gpu(b, {out}) : Tensor();
    EXPECT_EQ(ops::norm_folds(xt, wt, norm), rows == 1) << what;
    const auto xn = ref::rms_norm(x, nw, rows, in, 1e-5, one_plus);
    // f32 sums over `in` terms: the error bound scales with sum_k |xn w| (at most 3 in here) and
    // the activation's slope (below 1.1).
    const double atol = 4.0 * 3.0 * static_cast<double>(in) * std::ldexp(1.0, -24) + 1e-6;
    const Tensor got = ops::normed_linear(xt, norm, wt, bt);
    const Tensor gated = ops::gated_linear(xt, wt, ut, ops::Activation::SiLU, &norm);
    EXPECT_EQ(got.shape(), (Shape{rows, 1, out})) << what;
    test::expect_close(got, ref::linear(xn, w, b, rows, in, out), atol, 1e-5, what);
    test::expect_close(gated,
                       ref::gated(ops::Activation::SiLU, ref::linear(xn, w, {}, rows, in, out),
                                  ref::linear(xn, u, {}, rows, in, out)),
                       atol, 1e-5, what + " gated");
    // Aligned, the kernel reads 16 bytes at a time as it does after rms_norm's aligned output, so
    // the same normalized values give the same bits. (Misaligned rows take the scalar loads,
    // whose sums run in another order; and the plain product of a row of 2048 splits its k in
    // half-round slices, which the staged one does not: compared with whole rounds.)
    if (!misaligned) {
      const Tensor normed = ops::rms_norm(xt, norm.weight, norm.eps, one_plus);
      ops::detail::set_skinny_f16_half_round_split(false);
      const Tensor plain = ops::linear(normed, wt, bt);
      ops::detail::set_skinny_f16_half_round_split(true);
      test::expect_bitwise_equal(got, plain, what + " vs rms_norm, linear");
      test::expect_bitwise_equal(gated, ops::gated_linear(normed, wt, ut, ops::Activation::SiLU),
                                 what + " gated vs rms_norm, gated_linear");
    }
  }
  // The kernel's prologue itself serves up to 8 rows and several weight rows per thread (the
  // host folds one row only): the same bits as rms_norm then the product. One row's normalized
  // values are staged in shared memory, except with one workgroup (the same bits either way).
  const int64_t in = 64, out = 70;
  for (const int64_t rows : {1, 5, 8}) {
    const auto x = test::as_f32(rng.uniform(static_cast<size_t>(rows * in), -3, 3));
    const auto nw = test::as_f32(rng.uniform(static_cast<size_t>(in), 0.5, 1.5));
    const auto [w, wt] = half_weights(rng, out, in);
    const ops::RowNorm norm{test::to_gpu(nw, {in}), 1e-6f, rows == 5};
    const Tensor xt = test::to_gpu(x, {rows, in});
    // Split k too (where the kernel splits: one weight row per thread or one activation row),
    // against the plain product with the same split and rows per thread.
    for (const uint32_t split : {1u, 2u}) {
      ops::detail::set_skinny_f16_k_split(split);
      for (const uint32_t rpt : {1u, 2u, 4u}) {
        ops::detail::set_skinny_f16_rows_per_thread(rpt);
        const Tensor want =
            ops::linear(ops::rms_norm(xt, norm.weight, norm.eps, norm.one_plus), wt);
        for (const uint32_t groups : {0u, 1u, 3u}) {  // the prologue once for several blocks
          // Odd groups: the shared-memory trees where shuffles could end them (the same bits).
          ops::detail::set_skinny_f16_shuffle_tree(groups % 2 == 0);
          ops::detail::set_skinny_f16_stage_normed(groups != 1);
          ops::detail::set_skinny_f16_max_groups(groups);
          const Tensor got = Tensor::empty({rows, out});
          ops::detail::skinny_f16_normed(ops::detail::describe_rows(xt),
                                         ops::detail::describe_readable(wt).transposed(),
                                         ops::detail::describe_rows(got), Tensor(), norm);
          test::expect_bitwise_equal(got, want,
                                     std::to_string(rows) + " rows, " + std::to_string(rpt) +
                                         " weight rows per thread, " + std::to_string(groups) +
                                         " workgroups at most, split " + std::to_string(split));
        }
      }
    }
    ops::detail::reset_skinny_f16_settings();
  }
  // The precise math mode keeps the norm's own kernel: the same bits as rms_norm then linear.
  const auto x = test::as_f32(rng.uniform(static_cast<size_t>(in), -3, 3));
  const auto nw = test::as_f32(rng.uniform(static_cast<size_t>(in), 0.5, 1.5));
  const auto [w, wt] = half_weights(rng, out, in);
  const ops::RowNorm norm{test::to_gpu(nw, {in}), 1e-6f, false};
  const Tensor xt = test::to_gpu(x, {1, 1, in});
  set_math_mode(MathMode::Precise);
  EXPECT_FALSE(ops::norm_folds(xt, wt, norm));
  const Tensor precise = ops::normed_linear(xt, norm, wt);
  const Tensor precise_composed = ops::linear(ops::rms_norm(xt, norm.weight, norm.eps), wt);
  set_math_mode(MathMode::Fast);
  test::expect_bitwise_equal(precise, precise_composed, "precise math");
  test::expect_error(
      [&] {
        ops::normed_linear(xt, ops::RowNorm{Tensor::zeros({in + 1}), 1e-6f, false}, wt);
      },
      {"normed_linear", "norm weight", "[64]"});
  test::expect_error(
      [&] {
        const ops::RowNorm flat{Tensor::zeros({2, in}), 1e-6f, false};
        ops::gated_linear(xt, wt, wt, ops::Activation::SiLU, &flat);
      },
      {"gated_linear", "norm weight"});
}

// The LM head's greedy choice from its own product (normed_linear_argmax): the outputs of
// normed_linear bit for bit, and the argmax of those outputs (host reference: ref::argmax_rows,
// torch.argmax's order) with a tie (two equal weight rows: the first wins) and NaN outputs (the
// first NaN wins), over grids of every workgroup and of one and three, split rows and the
// shared-memory trees. A row that does not fold takes normed_linear and argmax_rows.
TEST(DecodeOps, NormedLinearArgmax) {
  Rng rng(31);
  enum Special { kNone, kTie, kNan };
  const std::tuple<int64_t, int64_t, Special> cases[] = {
      {2048, 1000, kNone}, {64, 3000, kTie}, {64, 3000, kNan}, {48, 37, kNone}};
  for (const auto& [in, out, special] : cases) {
    const std::string what = "in " + std::to_string(in) + " out " + std::to_string(out) +
                             (special == kTie   ? " tie"
                              : special == kNan ? " nan"
                                                : "");
    const auto x = test::as_f32(rng.uniform(static_cast<size_t>(in), 0.5, 1.5));
    const auto nw = test::as_f32(rng.uniform(static_cast<size_t>(in), 0.5, 1.5));
    const auto v = rng.uniform(static_cast<size_t>(out * in));
    std::vector<uint16_t> bits(v.size());
    for (size_t i = 0; i < v.size(); ++i) bits[i] = f32_to_f16_bits(static_cast<float>(v[i]));
    const int64_t row_len = in;
    auto set_row = [&bits, row_len](int64_t row, uint16_t value) {
      std::fill_n(bits.begin() + row * row_len, row_len, value);
    };
    if (special == kTie) {  // outputs near the sum of the (positive) normalized row: the largest
      set_row(1700, f32_to_f16_bits(1.0f));
      set_row(2500, f32_to_f16_bits(1.0f));
    }
    if (special == kNan) {
      set_row(1200, 0x7e00);
      set_row(2200, 0x7e00);
    }
    const Tensor wt = Tensor::from_bytes(bits.data(), DType::F16, {out, in});
    const ops::RowNorm norm{test::to_gpu(nw, {in}), 1e-5f, false};
    const Tensor xt = test::to_gpu(x, {1, 1, in});
    // (split, most workgroups): the rule's grid, three workgroups taking several blocks each with
    // the shared-memory trees, and one workgroup with split rows.
    for (const auto& [split, groups] : {std::pair{0u, 0u}, {0u, 3u}, {2u, 1u}}) {
      ops::detail::set_skinny_f16_k_split(split);
      ops::detail::set_skinny_f16_shuffle_tree(groups % 2 == 0);
      ops::detail::set_skinny_f16_max_groups(groups);
      const std::string with =
          what + ", split " + std::to_string(split) + ", " + std::to_string(groups) + " groups";
      Tensor ids;
      const Tensor got = ops::normed_linear_argmax(xt, norm, wt, ids);
      test::expect_bitwise_equal(got, ops::normed_linear(xt, norm, wt), with);
      ASSERT_TRUE(ids.defined()) << with;
      EXPECT_EQ(ids.shape(), (Shape{1})) << with;
      const auto want = ref::argmax_rows(got.to_double(), 1, out);
      EXPECT_EQ(ids.to_int()[0], want[0]) << with;
      if (special == kTie) {
        EXPECT_EQ(want[0], 1700) << with;
      }
      if (special == kNan) {
        EXPECT_EQ(want[0], 1200) << with;
      }
      // With an advance's fold record, the choice and the step's advance inside the product's
      // dispatch: the same outputs, the token in the state and the ring, and the record ready for
      // the next step (a second product, on -x, whose best output is another and lower).
      ops::ArgmaxAdvance advance;
      advance.state = Tensor::from_host_i32(std::vector<int32_t>{5, 9, 20}, {3});
      advance.ring = Tensor::empty_host_visible({4, 1}, DType::I32);
      advance.fold_record = ops::argmax_fold_record(advance);
      ASSERT_EQ(advance.fold_record.defined(), vk::Context::get().info().int64_atomics) << with;
      if (!advance.fold_record.defined()) continue;
      for (int32_t step = 0; step < 2; ++step) {
        const Tensor xs = step == 0 ? xt : ops::scale(xt, -1.0f);
        Tensor step_ids;
        const Tensor logits = ops::normed_linear_argmax(xs, norm, wt, step_ids, &advance);
        test::expect_bitwise_equal(logits, ops::normed_linear(xs, norm, wt), with + ", folded");
        const int32_t token = static_cast<int32_t>(ref::argmax_rows(logits.to_double(), 1, out)[0]);
        const auto state = advance.state.to_int();
        EXPECT_EQ(step_ids.to_int(), (std::vector<int64_t>{token})) << with << ", step " << step;
        EXPECT_EQ(state, (std::vector<int64_t>{token, 10 + step, 21 + step})) << with;
        EXPECT_EQ(static_cast<const int32_t*>(advance.ring.host_data())[(20 + step) % 4], token)
            << with << ", step " << step;
      }
    }
    ops::detail::reset_skinny_f16_settings();
  }
  // Misaligned (the product does not fold): normed_linear, then argmax_rows.
  const int64_t in = 40, out = 50;
  const auto x = test::as_f32(rng.uniform(static_cast<size_t>(in), -3, 3));
  const auto nw = test::as_f32(rng.uniform(static_cast<size_t>(in), 0.5, 1.5));
  const auto [w, wt] = half_weights(rng, out, in);
  const ops::RowNorm norm{test::to_gpu(nw, {in}), 1e-5f, true};
  const Tensor xt = rows_on_gpu(x, 1, in, true);
  Tensor ids;
  const Tensor got = ops::normed_linear_argmax(xt, norm, wt, ids);
  EXPECT_EQ(ids.to_int()[0], ref::argmax_rows(got.to_double(), 1, out)[0]);
  test::expect_bitwise_equal(got, ops::normed_linear(xt, norm, wt), "misaligned");
  const Tensor two_rows = test::to_gpu(std::vector<double>(2 * in, 1.0), {2, in});
  test::expect_error(
      [&] {
        Tensor none;
        ops::normed_linear_argmax(two_rows, norm, wt, none);
      },
      {"normed_linear_argmax", "one row"});
}

// A product that reads its input row from an f16 embedding table at a token id held on the device
// (normed_linear_of_embedding): the outputs of embedding then normed_linear bit for bit, the row
// stored by the storing dispatch only (bit for bit embedding's), an id outside the table as
// embedding gives it (zeros), a bias, and one input reused with other ids.
TEST(DecodeOps, NormedLinearOfEmbedding) {
  Rng rng(41);
  const int64_t vocab = 37, in = 256, out = 300;
  const auto [table_values, table] = half_weights(rng, vocab, in);
  const auto [w_values, w] = half_weights(rng, out, in);
  const ops::RowNorm norm{test::to_gpu(rng.uniform(static_cast<size_t>(in), 0.5, 1.5), {in}), 1e-5f,
                          false};
  const Tensor bias = test::to_gpu(rng.uniform(static_cast<size_t>(out)), {out});
  const Tensor ids = Tensor::from_host_i32(std::vector<int32_t>{0}, {1, 1});
  const Tensor store = Tensor::zeros({1, 1, in});
  const ops::EmbeddedInput e = ops::make_embedded_input(table, ids, store);
  ASSERT_TRUE(ops::embedding_folds(e, w, norm));
  for (const int32_t id : {5, 36, 37, -1}) {
    const std::string what = "id " + std::to_string(id);
    ids.copy_(Tensor::from_host_i32(std::vector<int32_t>{id}, {1, 1}));
    const Tensor x = ops::embedding(table, ids);
    for (const bool with_bias : {false, true}) {
      const Tensor b = with_bias ? bias : Tensor();
      store.copy_(Tensor::full({1, 1, in}, 7.0f));
      const Tensor read_only = ops::normed_linear_of_embedding(e, false, norm, w, b);
      test::expect_bitwise_equal(read_only, ops::normed_linear(x, norm, w, b), what);
      EXPECT_EQ(store.to_double(), std::vector<double>(in, 7.0)) << what << ": not stored";
      const Tensor stored = ops::normed_linear_of_embedding(e, true, norm, w, b);
      test::expect_bitwise_equal(stored, read_only, what);
      test::expect_bitwise_equal(store, x, what + ": the stored row");
    }
    if (id < 0 || id >= vocab) {
      EXPECT_EQ(x.to_double(), std::vector<double>(in, 0.0)) << what << ": zeros";
    }
  }
  ops::set_embedding_fold(false);
  EXPECT_FALSE(ops::embedding_folds(e, w, norm));
  test::expect_error([&] { ops::normed_linear_of_embedding(e, true, norm, w); },
                     {"normed_linear_of_embedding", "embedding_folds"});
  ops::set_embedding_fold(true);
  const auto [narrow_values, narrow] = half_weights(rng, out, 40);  // another K: not this table's
  EXPECT_FALSE(ops::embedding_folds(e, narrow, norm));
  test::expect_error(
      [&] {
        ops::make_embedded_input(table, ids, Tensor::zeros({1, 1, 10}));
      },
      {"make_embedded_input", "256 values"});
}

}  // namespace
}  // namespace vkf
