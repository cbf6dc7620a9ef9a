// Stream-K products of the fp32 tiled GEMM (ops/matmul_tiling.h, matmul_tiled_pipelined.comp with
// STREAM_K, matmul_streamk_fixup.comp): forced worker counts on any device, so lavapipe runs every
// case that the rule picks on a GPU. Against the double reference: every transpose, ragged M, N
// and K, tiles shared by many workers and workers spanning several tiles, whole tiles first (the
// data-parallel rounds), alpha/beta/bias into a strided output, an f16 weight and F16 operand
// rounding. Bit for bit: one worker gives the plain grid's bits (every tile whole); a single tile
// split at slice boundaries that split-K also cuts at gives split-K's bits; a repeat gives the
// same bits. Every case checks that the product did run as stream-K. The rule's choices on the
// shapes it was measured on are checked too.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/launch.h"
#include "ops/matmul.h"
#include "ops/matmul_coopmat.h"
#include "ops/matmul_kernels.h"
#include "ops/matmul_ref.h"
#include "ops/matmul_tiling.h"
#include "test_util.h"
#include "vk/context.h"

namespace vkf {
namespace {

using test::Rng;

using test::product_atol;
constexpr double kRtol = test::kProductRtol;

// Restores every setting a test changes; split-K off, so that each product is one product.
struct Restore {
  Restore() { ops::detail::set_split_k(-1); }
  ~Restore() {
    ops::detail::set_stream_k(0);
    ops::detail::set_split_k(0);
    ops::detail::set_coopmat_choice(coopmat);
    set_matmul_precision(precision);
  }
  std::string coopmat = ops::detail::coopmat_choice();
  MatmulPrecision precision = matmul_precision();
};

// Runs `product` with `workers` stream-K workers (0: the rule, -1: never) and checks whether it
// ran as stream-K.
Tensor run_with(int64_t workers, const std::function<Tensor()>& product, bool expect_stream_k,
                const std::string& what) {
  ops::detail::set_stream_k(workers);
  const uint64_t before = ops::detail::stream_k_dispatches();
  Tensor out = product();
  EXPECT_EQ(ops::detail::stream_k_dispatches() - before, expect_stream_k ? 1u : 0u) << what;
  return out;
}

struct Case {
  int64_t m, n, k;
  bool ta, tb;
};

// op(A) op(B) with random operands, against the reference, for each worker count.
void check_against_reference(Rng& rng, const Case& c, const std::vector<int64_t>& workers) {
  const ref::MatmulShape s{1, c.m, c.n, c.k, c.ta, c.tb, false};
  const auto a = test::as_f32(rng.uniform(s.a_size())), b = test::as_f32(rng.uniform(s.b_size()));
  const Tensor ta = test::to_gpu(a, c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k});
  const Tensor tb = test::to_gpu(b, c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n});
  const auto want = ref::matmul(a, b, s);
  for (int64_t w : workers) {
    const std::string what = std::to_string(c.m) + "x" + std::to_string(c.n) + "x" +
                             std::to_string(c.k) + (c.ta ? " A^T" : "") + (c.tb ? " B^T" : "") +
                             ", " + std::to_string(w) + " workers";
    const Tensor got = run_with(
        w, [&] { return ops::matmul(ta, tb, c.ta, c.tb); }, true, what);
    test::expect_close(got, want, product_atol(c.k), kRtol, what);
  }
}

// Every transpose; 3 x 2 tiles of 128 (M, N ragged) over 23 8-deep slices (K ragged): from one
// worker (all tiles whole) to more workers than tiles (each tile split between several), with
// worker counts that do and do not divide the iterations.
TEST(MatmulStreamK, MatchesReferenceEveryTranspose) {
  Rng rng(1);
  Restore restore;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      check_against_reference(rng, {300, 200, 181, ta, tb}, {1, 2, 4, 5, 7, 13});
}

// Whole tiles first: 5 x 3 = 15 tiles on 2 workers (whole-tile rounds, then a region of 3 tiles),
// and one tile on 40 workers (a few slices each), and a single slice deep (K < 8).
TEST(MatmulStreamK, WholeTileRoundsAndThinRanges) {
  Rng rng(2);
  Restore restore;
  check_against_reference(rng, {600, 300, 64, false, true}, {2, 3, 6});
  check_against_reference(rng, {100, 90, 333, false, false}, {40});
  check_against_reference(rng, {140, 150, 5, true, false}, {3});
}

// alpha, beta and a bias into a column window of a wider output, as matmul_into writes it.
TEST(MatmulStreamK, AlphaBetaBiasIntoStridedOutput) {
  Rng rng(3);
  Restore restore;
  const ref::MatmulShape s{1, 260, 140, 77, false, false, false};
  const auto a = test::as_f32(rng.uniform(s.a_size())), b = test::as_f32(rng.uniform(s.b_size()));
  const auto bias = test::as_f32(rng.uniform(s.n));
  const int64_t width = s.n + 6;
  const auto before = test::as_f32(rng.uniform(s.m * width));
  const Tensor ta = test::to_gpu(a, {s.m, s.k}), tb = test::to_gpu(b, {s.k, s.n});
  const Tensor tbias = test::to_gpu(bias, {s.n});
  const float alpha = 0.5f, beta = 0.75f;
  const auto prod = ref::matmul(a, b, s);
  std::vector<double> want = before;
  for (int64_t m = 0; m < s.m; ++m)
    for (int64_t n = 0; n < s.n; ++n) {
      double& w = want[static_cast<size_t>(m * width + 3 + n)];
      w = alpha * prod[static_cast<size_t>(m * s.n + n)] + beta * w + bias[static_cast<size_t>(n)];
    }
  for (int64_t workers : {1, 3, 11}) {
    const Tensor got = run_with(
        workers,
        [&] {
          Tensor wide = test::to_gpu(before, {s.m, width});
          ops::matmul_into(ta, tb, false, false, wide.slice(1, 3, 3 + s.n), alpha, beta, tbias);
          return wide;
        },
        true, "alpha/beta/bias, " + std::to_string(workers) + " workers");
    test::expect_close(got, want, 2 * product_atol(s.k), kRtol, "alpha/beta/bias");
  }
}

// The f16b variant (a linear layer over a weight stored in f16) and F16 precision's operand
// rounding on the portable kernel.
TEST(MatmulStreamK, F16WeightAndF16Rounding) {
  Rng rng(4);
  Restore restore;
  const int64_t rows = 150, in = 96, out = 140;
  const auto wv = rng.uniform(static_cast<size_t>(out * in));
  std::vector<uint16_t> bits(wv.size());
  std::vector<double> w(wv.size());
  for (size_t i = 0; i < wv.size(); ++i) {
    bits[i] = f32_to_f16_bits(static_cast<float>(wv[i]));
    w[i] = f16_bits_to_f32(bits[i]);
  }
  const Tensor wt = Tensor::from_bytes(bits.data(), DType::F16, {out, in});
  const auto x = test::as_f32(rng.uniform(static_cast<size_t>(rows * in)));
  const Tensor xt = test::to_gpu(x, {rows, in});
  const auto want = ref::linear(x, w, {}, rows, in, out);
  test::expect_close(run_with(
                         5, [&] { return ops::linear(xt, wt); }, true, "f16 weight"),
                     want, product_atol(in), kRtol, "f16 weight");

  set_matmul_precision(MatmulPrecision::F16);
  ops::detail::set_coopmat_choice("off");  // the tiled kernel, also on tensor-core devices
  auto rounded = [](std::vector<double> v) {
    for (double& e : v) e = f16_bits_to_f32(f32_to_f16_bits(static_cast<float>(e)));
    return v;
  };
  const auto wf = test::as_f32(wv);
  const Tensor wf_gpu = test::to_gpu(wf, {out, in});
  test::expect_close(run_with(
                         7, [&] { return ops::linear(xt, wf_gpu); }, true, "f16 rounding"),
                     ref::linear(rounded(x), rounded(wf), {}, rows, in, out), product_atol(in),
                     kRtol, "f16 rounding");
}

// One worker sums every tile whole, in the plain grid's order of multiply-adds: the same bits.
// One tile of 32 slices on 2 and 4 workers is cut where split-K's 2 and 4 chunks cut it, and the
// fix-up adds the parts as split-K's reduction adds its chunks: split-K's bits. A repeat of a
// product gives its bits again.
TEST(MatmulStreamK, SameBitsAsPlainAndSplitK) {
  Rng rng(5);
  Restore restore;
  {
    const auto a = test::as_f32(rng.uniform(300 * 70)), b = test::as_f32(rng.uniform(70 * 260));
    const Tensor ta = test::to_gpu(a, {300, 70}), tb = test::to_gpu(b, {70, 260});
    auto product = [&] { return ops::matmul(ta, tb); };
    const Tensor plain = run_with(-1, product, false, "plain");
    test::expect_bitwise_equal(run_with(1, product, true, "one worker"), plain, "one worker");
    const Tensor split = run_with(6, product, true, "6 workers");
    test::expect_bitwise_equal(run_with(6, product, true, "6 workers again"), split,
                               "6 workers, repeated");
  }
  const auto a = test::as_f32(rng.uniform(100 * 256)), b = test::as_f32(rng.uniform(256 * 120));
  const auto bias = test::as_f32(rng.uniform(120));
  const Tensor ta = test::to_gpu(a, {100, 256}), tb = test::to_gpu(b, {256, 120});
  const Tensor tbias = test::to_gpu(bias, {120});
  auto product = [&] {
    Tensor out = Tensor::empty({100, 120});
    ops::matmul_into(ta, tb, false, false, out, 0.75f, 0.0f, tbias);
    return out;
  };
  for (int64_t parts : {2, 4}) {
    ops::detail::set_stream_k(-1);
    ops::detail::set_split_k(parts);
    const Tensor split_k = product();
    ops::detail::set_split_k(-1);
    const std::string what = std::to_string(parts) + " parts";
    test::expect_bitwise_equal(run_with(parts, product, true, what), split_k, what);
  }
}

// The plan: worker counts are clamped to the iterations, whole-tile rounds leave the last,
// incomplete round to the stream-K region (two rounds with set_stream_k_region(2)), the workspace
// holds two partial tiles per worker (and memory plans count it), and "never" and batches run the
// plain grid.
TEST(MatmulStreamK, Plan) {
  Restore restore;
  using ops::detail::stream_k_plan;
  ops::detail::set_stream_k(264);
  const auto a = stream_k_plan(1, 8192, 576, 576);  // 320 tiles: one round whole, 56 streamed
  ASSERT_TRUE(a);
  EXPECT_EQ(a->workers, 264u);
  EXPECT_EQ(a->dp_tiles, 264u);
  const auto b = stream_k_plan(1, 4096, 4096, 4096);  // 1024 tiles: 3 rounds whole, 232 streamed
  ASSERT_TRUE(b);
  EXPECT_EQ(b->dp_tiles, 792u);
  EXPECT_EQ(b->workspace_elements(ops::detail::kLarge), 2 * 264 * 128 * 128);
  const auto c = stream_k_plan(1, 100, 100, 16);  // one tile of 2 slices: 2 workers at most
  ASSERT_TRUE(c);
  EXPECT_EQ(c->workers, 2u);
  EXPECT_FALSE(stream_k_plan(2, 8192, 576, 576));
  EXPECT_EQ(ops::detail::gemm_plan(1, 4096, 4096, 4096), "tiled 128x128x8 stream-k 264/792");
  bool counted = false;
  for (const auto& t : ops::detail::gemm_temporaries(8192, 576, 576, true, true))
    counted = counted || t.elements == 2 * 264 * 128 * 128;
  EXPECT_TRUE(counted || ops::detail::coopmat_plan(1, 8192, 576)) << "stream-K workspace";
  ops::detail::set_stream_k_region(2);
  EXPECT_EQ(stream_k_plan(1, 4096, 4096, 4096)->dp_tiles, 528u);
  ops::detail::set_stream_k_region(1);
  ops::detail::set_stream_k(-1);
  EXPECT_FALSE(stream_k_plan(1, 8192, 576, 576));
}

// The rule on the H200's training products it was measured on (132 multiprocessors; tiles of 128,
// slices of 8): stream-K for the 8192 x 576 products with K >= 512, the 576- and 1536-row weight
// gradients and the LM head's input gradient; whole tiles or split-K for the rest.
TEST(MatmulStreamK, RuleOnMeasuredShapes) {
  using ops::detail::stream_k_pays;
  auto pays = [](int64_t m, int64_t n, int64_t k) {
    return stream_k_pays(((m + 127) / 128) * ((n + 127) / 128), (k + 7) / 8, 132);
  };
  EXPECT_TRUE(pays(8192, 576, 576));
  EXPECT_TRUE(pays(8192, 576, 1536));
  EXPECT_TRUE(pays(576, 576, 8192));
  EXPECT_TRUE(pays(1536, 576, 8192));
  EXPECT_TRUE(pays(1280, 576, 49152));
  EXPECT_FALSE(pays(8192, 576, 192));   // 24 slices
  EXPECT_FALSE(pays(8192, 192, 576));   // one round, one workgroup per multiprocessor
  EXPECT_FALSE(pays(192, 576, 8192));   // 39 slices per worker
  EXPECT_FALSE(pays(8192, 1536, 576));  // a last round of 240 tiles
  EXPECT_FALSE(pays(8192, 512, 2048));  // one full round
  EXPECT_FALSE(pays(2048, 2048, 8192));
  EXPECT_FALSE(pays(4096, 4096, 4096));
}

}  // namespace
}  // namespace vkf
