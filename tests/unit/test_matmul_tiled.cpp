// The two implementations of the fp32 tiled GEMM (ops::detail::set_tiled_variant): the pipelined
// kernel ("new", the default, and each of its options) must give bit for bit the results of the
// original single-buffered kernel ("old") -- on both tiles, every transpose combination, M, N and
// K off every tile multiple, operands whose lines are 16-byte aligned (vector loads, also across a
// ragged edge) and operands that are not (element loads), batches with a shared operand,
// alpha/beta/bias into a strided output (element stores, and 16-byte stores where the output's
// rows are aligned), grids rasterized in bands and split into several
// dispatches, split-K, the f16b variant (an f16 weight), F16 operand rounding and the precise
// build. The old kernel's result is also checked against the double reference, and the kernel
// profile must show that each variant ran its own module, so a switch that did nothing fails.
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "core/launch.h"
#include "ops/matmul.h"
#include "ops/matmul_coopmat.h"
#include "ops/matmul_kernels.h"
#include "ops/matmul_ref.h"
#include "ops/matmul_relayout.h"
#include "test_util.h"
#include "vk/context.h"
#include "vk/error.h"

namespace vkf {
namespace {

using ops::detail::TileChoice;
using test::Rng;

using test::product_atol;
constexpr double kRtol = test::kProductRtol;

// Restores every setting a test changes, also when it fails. Split-K starts off, so that each
// case is the one product it describes on every device (GPUs split few-tile products by default).
struct Restore {
  Restore() { ops::detail::set_split_k(-1); }
  ~Restore() {
    ops::detail::set_tiled_variant(variant);
    ops::detail::set_tile_choice(tile);
    ops::detail::set_grid_limit(65535);
    ops::detail::set_split_k(0);
    ops::detail::set_coopmat_choice(coopmat);
    set_matmul_precision(precision);
    set_math_mode(math);
  }
  std::string variant = ops::detail::tiled_variant();
  TileChoice tile = ops::detail::tile_choice();
  std::string coopmat = ops::detail::coopmat_choice();
  MatmulPrecision precision = matmul_precision();
  MathMode math = math_mode();
};

// Which operands the pipelined kernel should read with 16-byte loads, where a case knows.
struct VectorLoads {
  bool a, b;
};

// A run of the pipelined kernel: variant and tile.
struct Run {
  std::string variant = "new";
  TileChoice tile = TileChoice::Medium;
};

// Runs `product` under `variant` on `tile` and returns its result. Checks that the pipelined
// kernel ran exactly when the variant is not "old" (counted by the host and, where the device has
// timestamps, seen in the kernel profile), that "/scalar" made no 16-byte loads, and that the
// other variants made those `loads` says.
Tensor run_as(const std::string& variant, TileChoice tile, const std::function<Tensor()>& product,
              const std::string& what, std::optional<VectorLoads> loads = std::nullopt) {
  ops::detail::set_tiled_variant(variant);
  ops::detail::set_tile_choice(tile);
  auto& stream = vk::Context::get().stream();
  stream.set_profiling(false);
  stream.set_profiling(true);  // clears the totals
  const auto before = ops::detail::tiled_load_counts();
  Tensor out = product();
  const auto after = ops::detail::tiled_load_counts();
  const auto profile = stream.profile();
  stream.set_profiling(false);
  const std::string where = what + " [" + variant + "]";
  const uint64_t dispatches = after.dispatches - before.dispatches;
  const uint64_t vector_a = after.vector_a - before.vector_a;
  const uint64_t vector_b = after.vector_b - before.vector_b;
  EXPECT_EQ(dispatches > 0, variant != "old") << where;
  if (variant.find("/scalar") != std::string::npos) {
    EXPECT_EQ(vector_a + vector_b, 0u) << where;
  } else if (loads) {
    EXPECT_EQ(vector_a, loads->a ? dispatches : 0) << where << ": 16-byte loads of A";
    EXPECT_EQ(vector_b, loads->b ? dispatches : 0) << where << ": 16-byte loads of B";
  }
  if (vk::Context::get().info().timestamps) {
    bool pipelined = false, original = false;
    for (const auto& p : profile) {
      const bool tiled = p.label.rfind("matmul_tiled", 0) == 0;
      const bool new_kernel = p.label.rfind("matmul_tiled_pipelined", 0) == 0;
      pipelined = pipelined || new_kernel;
      original = original || (tiled && !new_kernel);
    }
    EXPECT_EQ(pipelined, variant != "old") << where;
    EXPECT_EQ(original, variant == "old") << where;
  }
  return out;
}

// The old kernel's result (64x64 tile) against the reference `want`, then each run's against
// old's bits. Tiles need no old run of their own: every output is the same sum in the same order
// on every tile.
void expect_same_bits(const std::function<Tensor()>& product, const std::vector<double>& want,
                      double atol, const std::vector<Run>& runs, const std::string& what,
                      std::optional<VectorLoads> loads = std::nullopt) {
  const Tensor old = run_as("old", TileChoice::Medium, product, what);
  test::expect_close(old, want, atol, kRtol, what + " [old]");
  for (const Run& r : runs) {
    const std::string tile = r.tile == TileChoice::Large ? " 128x128" : " 64x64";
    test::expect_bitwise_equal(run_as(r.variant, r.tile, product, what + tile, loads), old,
                               what + tile + " [" + r.variant + " vs old]");
  }
}

// How an operand is stored: contiguous, or as a window of a wider matrix whose row pitch is a
// multiple of 4 floats (16-byte aligned lines) or odd (no 16-byte loads).
enum class Pitch { Contiguous, Aligned, Odd };

// A rows x cols f32 matrix stored as `pitch` says: its values row-major, the view, and whether
// its lines allow 16-byte loads.
struct Operand {
  std::vector<double> values;
  Tensor view;
  bool aligned;
};
Operand operand(Rng& rng, int64_t rows, int64_t cols, Pitch pitch) {
  const int64_t pad = pitch == Pitch::Contiguous ? 0
                      : pitch == Pitch::Aligned  ? 4 - cols % 4
                                                 : (cols % 2 == 0 ? 1 : 2);
  const int64_t ld = cols + pad;
  const auto all = test::as_f32(rng.uniform(static_cast<size_t>(rows * ld)));
  Operand o;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) o.values.push_back(all[static_cast<size_t>(r * ld + c)]);
  o.view = test::to_gpu(all, {rows, ld}).slice(1, 0, cols);
  o.aligned = ld % 4 == 0 && o.view.address() % 16 == 0;
  return o;
}

// One unbatched product op(A) op(B) of M x N x K, operands stored as `pa` / `pb` say: old against
// `runs`.
void check_product(Rng& rng, int64_t m, int64_t n, int64_t k, bool ta, bool tb, Pitch pa, Pitch pb,
                   const std::vector<Run>& runs, const std::string& what) {
  const ref::MatmulShape s{1, m, n, k, ta, tb, false};
  const Operand a = operand(rng, ta ? k : m, ta ? m : k, pa);
  const Operand b = operand(rng, tb ? n : k, tb ? k : n, pb);
  const std::string name = what + " M=" + std::to_string(m) + " N=" + std::to_string(n) +
                           " K=" + std::to_string(k) + (ta ? " A^T" : "") + (tb ? " B^T" : "");
  expect_same_bits([&] { return ops::matmul(a.view, b.view, ta, tb); },
                   ref::matmul(a.values, b.values, s), product_atol(k), runs, name,
                   VectorLoads{a.aligned, b.aligned});
}

// Every transpose combination, M, N and K ragged against the tile and the slice depth. Operands
// with 16-byte aligned lines take vector loads inside and element loads across the edges (K = 37:
// the chunk at k = 36 crosses it), odd pitches element loads throughout; between them the four
// cases store chunks along and across the shared rows from both kinds of load.
TEST(MatmulTiled, SameBitsAsOldEveryTranspose) {
  Rng rng(1);
  Restore restore;
  const Pitch al = Pitch::Aligned, odd = Pitch::Odd;
  check_product(rng, 69, 131, 37, false, false, al, al, {{}}, "nn");
  check_product(rng, 69, 131, 37, true, false, al, odd, {{}}, "tn");
  check_product(rng, 69, 131, 37, false, true, odd, al, {{}}, "nt");
  check_product(rng, 69, 131, 37, true, true, al, al, {{}}, "tt");
}

// The 128x128 tile (8- and 16-deep slices: one and two chunks per thread and operand) and the
// pipelined kernel's options, on a grid of 3 x 3 (64x64) tiles. The first tile of each grid lies
// inside the matrix, so every slice but its k tail takes the unchecked interior loads unless
// "/checked" turns them off.
TEST(MatmulTiled, SameBitsAsOldLargeTileAndOptions) {
  Rng rng(2);
  Restore restore;
  const Pitch al = Pitch::Aligned;
  check_product(rng, 140, 150, 45, false, false, al, al,
                {{"new", TileChoice::Large},
                 {"new/checked", TileChoice::Large},
                 {"new/bk16", TileChoice::Large},
                 {"new/single/warp16x2", TileChoice::Medium},
                 {"new/scalar/rowmajor", TileChoice::Medium}},
                "nn");
}

// Batches (of A against one B shared by the batch, and against a batch of B), into a column
// window of a wider output with alpha, beta and a bias: at an odd offset (element stores) and at
// a 16-byte aligned one (4 columns per store, the ragged last columns element by element).
TEST(MatmulTiled, SameBitsAsOldBatchesAlphaBetaBias) {
  Rng rng(3);
  Restore restore;
  for (bool shared_b : {false, true})
    for (int64_t offset : {2, 4}) {
      const ref::MatmulShape s{3, 67, 70, 44, false, false, shared_b};
      const auto a = test::as_f32(rng.uniform(s.a_size()));
      const auto b = test::as_f32(rng.uniform(s.b_size()));
      const auto bias = test::as_f32(rng.uniform(s.n));
      const int64_t width = s.n + 10;
      const auto before = test::as_f32(rng.uniform(s.batch * s.m * width));
      Shape b_shape{s.k, s.n};
      if (!shared_b) b_shape.insert(b_shape.begin(), s.batch);
      const Tensor ta = test::to_gpu(a, {s.batch, s.m, s.k}), tb = test::to_gpu(b, b_shape);
      const Tensor tbias = test::to_gpu(bias, {s.n});
      const float alpha = 0.5f, beta = 0.75f;
      auto product = [&] {
        Tensor wide = test::to_gpu(before, {s.batch, s.m, width});
        ops::matmul_into(ta, tb, false, false, wide.slice(2, offset, offset + s.n), alpha, beta,
                         tbias);
        return wide;
      };
      const auto prod = ref::matmul(a, b, s);
      std::vector<double> want = before;
      for (int64_t z = 0; z < s.batch; ++z)
        for (int64_t m = 0; m < s.m; ++m)
          for (int64_t n = 0; n < s.n; ++n) {
            double& w = want[static_cast<size_t>((z * s.m + m) * width + offset + n)];
            w = alpha * prod[static_cast<size_t>((z * s.m + m) * s.n + n)] + beta * w + bias[n];
          }
      const std::string what = std::string("batch 3") + (shared_b ? " shared B" : "") +
                               ", output offset " + std::to_string(offset);
      const uint64_t stores_before = ops::detail::tiled_load_counts().vector_c;
      expect_same_bits(product, want, 2 * product_atol(s.k), {{}}, what, VectorLoads{true, false});
      EXPECT_EQ(ops::detail::tiled_load_counts().vector_c > stores_before, offset == 4)
          << what << ": 16-byte stores of C";
    }
}

// A grid of more tile rows than one rasterization band (10 rows of 3 tiles: a band of 8 and one
// of 2), the same grid cut into dispatches of at most 2 x 2 workgroups, and split-K (each K chunk
// a batch entry of the tiled kernel).
TEST(MatmulTiled, SameBitsAsOldGridsAndSplitK) {
  Rng rng(4);
  Restore restore;
  const Pitch c = Pitch::Contiguous;
  check_product(rng, 64 * 9 + 5, 132, 24, false, false, c, c, {{}}, "10 x 3 tiles");
  ops::detail::set_grid_limit(2);
  check_product(rng, 64 * 9 + 5, 132, 24, false, false, c, c, {{}}, "grid split");
  ops::detail::set_grid_limit(65535);
  for (int64_t chunks : {2, 3}) {
    ops::detail::set_split_k(chunks);
    check_product(rng, 40, 68, 96, false, false, c, c, {{}}, "split-K " + std::to_string(chunks));
  }
}

// The f16b variant: activations [37, 61] (element loads) against a weight stored in f16 whose rows
// of 61 halves lie 64 apart (8-byte loads inside, element loads across k = 60); with 72 outputs
// the first column of tiles lies inside the weight, whose slices but the k tail then take the
// unchecked interior loads.
TEST(MatmulTiled, SameBitsAsOldF16Weight) {
  Rng rng(5);
  Restore restore;
  for (const int64_t out : {45, 72}) {
    const int64_t rows = 37, in = 61, pitch = 64;
    const auto wv = rng.uniform(static_cast<size_t>(out * pitch));
    std::vector<uint16_t> bits(wv.size());
    std::vector<double> w;
    for (size_t i = 0; i < wv.size(); ++i) {
      bits[i] = f32_to_f16_bits(static_cast<float>(wv[i]));
      if (static_cast<int64_t>(i) % pitch < in) w.push_back(f16_bits_to_f32(bits[i]));
    }
    const Tensor wt = Tensor::from_bytes(bits.data(), DType::F16, {out, pitch}).slice(1, 0, in);
    const auto x = test::as_f32(rng.uniform(static_cast<size_t>(rows * in)));
    const auto bias = test::as_f32(rng.uniform(static_cast<size_t>(out)));
    const Tensor xt = test::to_gpu(x, {rows, in}), bt = test::to_gpu(bias, {out});
    expect_same_bits([&] { return ops::linear(xt, wt, bt); },
                     ref::linear(x, w, bias, rows, in, out), product_atol(in), {{}},
                     "f16 weight, " + std::to_string(out) + " outputs",
                     VectorLoads{false, wt.address() % 8 == 0});
  }
}

// F16 matmul precision on the portable kernel (every operand element rounded to f16 as it is
// loaded), and the precise build (double accumulators) where the device has fp64.
TEST(MatmulTiled, SameBitsAsOldRoundedAndPrecise) {
  Rng rng(6);
  Restore restore;
  {
    set_matmul_precision(MatmulPrecision::F16);
    ops::detail::set_coopmat_choice("off");  // the tiled kernel, also on tensor-core devices
    const ref::MatmulShape s{1, 69, 131, 37, false, false, false};
    const Operand a = operand(rng, s.m, s.k, Pitch::Aligned);
    const Operand b = operand(rng, s.k, s.n, Pitch::Aligned);
    auto rounded = [](std::vector<double> v) {
      for (double& x : v) x = f16_bits_to_f32(f32_to_f16_bits(static_cast<float>(x)));
      return v;
    };
    expect_same_bits([&] { return ops::matmul(a.view, b.view); },
                     ref::matmul(rounded(a.values), rounded(b.values), s), product_atol(s.k), {{}},
                     "f16 rounding", VectorLoads{a.aligned, b.aligned});
    set_matmul_precision(MatmulPrecision::F32);
  }
  set_math_mode(MathMode::Precise);
  check_product(rng, 69, 131, 37, false, false, Pitch::Aligned, Pitch::Aligned, {{}}, "precise");
}

// Operand relayout (ops/matmul_relayout.h): transposing a row-major A or a column-major B into
// temporaries first changes no bit of any product -- nn, nt and tt, ragged sizes, odd pitches,
// a batch against a shared B, split-K -- and the transpose kernel does run (one or two more
// dispatches).
TEST(MatmulTiled, RelayoutToTnChangesNoBit) {
  Rng rng(7);
  Restore restore;
  struct Guard {
    ~Guard() { ops::detail::set_tiled_relayout(ops::detail::RelayoutChoice::Auto); }
  } guard;
  auto& stream = vk::Context::get().stream();
  auto both = [&](const std::function<Tensor()>& product, int transposes, const std::string& what) {
    ops::detail::set_tiled_relayout(ops::detail::RelayoutChoice::Off);
    const uint64_t d0 = stream.dispatch_count();
    const Tensor plain = product();
    const uint64_t plain_dispatches = stream.dispatch_count() - d0;
    ops::detail::set_tiled_relayout(ops::detail::RelayoutChoice::Always);
    const uint64_t d1 = stream.dispatch_count();
    const Tensor relaid = product();
    EXPECT_EQ(stream.dispatch_count() - d1, plain_dispatches + static_cast<uint64_t>(transposes))
        << what;
    test::expect_bitwise_equal(relaid, plain, what);
  };
  const Pitch al = Pitch::Aligned, odd = Pitch::Odd, c = Pitch::Contiguous;
  for (const auto& [ta, tb, pa, pb, transposes, name] :
       std::vector<std::tuple<bool, bool, Pitch, Pitch, int, std::string>>{
           {false, false, al, odd, 1, "nn"},
           {false, true, odd, al, 2, "nt"},
           {true, true, c, c, 1, "tt"},
           {true, false, al, al, 0, "tn"}}) {
    const Operand a = operand(rng, ta ? 37 : 69, ta ? 69 : 37, pa);
    const Operand b = operand(rng, tb ? 131 : 37, tb ? 37 : 131, pb);
    for (const TileChoice tile : {TileChoice::Medium, TileChoice::Large}) {
      ops::detail::set_tile_choice(tile);
      both([&] { return ops::matmul(a.view, b.view, ta, tb); }, transposes,
           name + (tile == TileChoice::Large ? " 128x128" : " 64x64"));
    }
  }
  ops::detail::set_tile_choice(TileChoice::Auto);
  // A batch of 3 against one B (merged into one taller product) and against a batch of B^T.
  const auto av = test::as_f32(rng.uniform(3 * 40 * 24)),
             bv = test::as_f32(rng.uniform(3 * 24 * 33));
  const Tensor ta = test::to_gpu(av, {3, 40, 24}), tb = test::to_gpu(bv, {3, 33, 24});
  const Tensor shared =
      test::to_gpu(std::vector<double>(bv.begin(), bv.begin() + 24 * 33), {24, 33});
  both([&] { return ops::matmul(ta, shared, false, false); }, 1, "batch, shared B");
  both([&] { return ops::matmul(ta, tb, false, true); }, 2, "batch nt");
  // Split-K: the chunks are batch entries of the tiled product.
  ops::detail::set_split_k(3);
  const Operand a = operand(rng, 40, 96, c), b = operand(rng, 68, 96, c);
  both([&] { return ops::matmul(a.view, b.view, false, true); }, 2, "split-K 3 nt");
}

// The operand transposes themselves (matmul_transpose.comp), f32 and rounded to f16, against the
// host: whole tiles, partial tiles at the edges, padded row strides, a batch, a column-major
// source, a view starting one element in, an odd stride and a single row.
TEST(MatmulTiled, TransposedCopies) {
  Rng rng(21);
  struct Case {
    int64_t batch, rows, cols, ld, offset;  // source rows of `cols` elements at stride ld
    bool column_major;
    std::string what;
  };
  for (const Case& c : std::vector<Case>{{1, 64, 64, 64, 0, false, "one whole tile"},
                                         {1, 136, 200, 204, 0, false, "edges, padded stride"},
                                         {2, 128, 192, 196, 0, false, "batch of 2"},
                                         {1, 132, 96, 100, 0, false, "132 rows"},
                                         {1, 128, 130, 136, 1, false, "view one element in"},
                                         {1, 70, 33, 37, 0, false, "odd stride"},
                                         {1, 1, 100, 100, 0, false, "one row"},
                                         {1, 96, 160, 160, 0, true, "column-major source"}}) {
    const int64_t bs = c.rows * c.ld + 8;
    const auto host = test::as_f32(rng.uniform(static_cast<size_t>(c.offset + c.batch * bs)));
    const Tensor all = test::to_gpu(host, {c.offset + c.batch * bs});
    const Tensor base = all.slice(0, c.offset, c.offset + c.batch * bs);
    // Source element (z, r, e) of `rows` lines of `cols` elements lies at z * bs + r * ld + e.
    const ops::detail::MatDesc d =
        c.column_major
            ? ops::detail::MatDesc{base, c.batch, c.cols, c.rows, c.batch > 1 ? bs : 0, 1, c.ld}
            : ops::detail::MatDesc{base, c.batch, c.rows, c.cols, c.batch > 1 ? bs : 0, c.ld, 1};
    for (const bool to_f16 : {false, true}) {
      const std::string what = c.what + (to_f16 ? ", f16" : ", f32");
      const Tensor t = ops::detail::transposed_copy(d, c.column_major, to_f16);
      ASSERT_EQ(t.numel(), c.batch * c.rows * c.cols) << what;
      ASSERT_EQ(t.dtype(), to_f16 ? DType::F16 : DType::F32) << what;
      const auto got = t.to(DType::F32).to_double();
      for (int64_t z = 0; z < c.batch; ++z)
        for (int64_t e = 0; e < c.cols; ++e)
          for (int64_t r = 0; r < c.rows; ++r) {
            const float x =
                static_cast<float>(host[static_cast<size_t>(c.offset + z * bs + r * c.ld + e)]);
            const float want = to_f16 ? f16_bits_to_f32(f32_to_f16_bits(x)) : x;
            ASSERT_EQ(got[static_cast<size_t>((z * c.cols + e) * c.rows + r)], want)
                << what << " batch " << z << " line " << r << " element " << e;
          }
    }
  }
}

// The size rule on the training shapes it was measured on (bench/RESULTS.md, eighth and
// eighteenth sessions): large forward products ("nt") and the input gradients up to K = 8192
// ("nn") are relaid; the k/v products (N = 512 at 1B, 192 at 135M), the 135M q/o products and
// the LM head's K = 128256 "nn" (dh of a loss chunk) are not.
TEST(MatmulTiled, RelayoutRule) {
  using ops::detail::relayout_pays;
  EXPECT_TRUE(relayout_pays(1, 8192, 2048, 2048, 1, 1, true, true));
  EXPECT_TRUE(relayout_pays(1, 8192, 8192, 2048, 1, 1, true, true));
  EXPECT_TRUE(relayout_pays(1, 8192, 2048, 8192, 1, 1, true, true));
  EXPECT_TRUE(relayout_pays(1, 8192, 1536, 576, 1, 1, true, true));
  EXPECT_FALSE(relayout_pays(1, 8192, 512, 2048, 1, 1, true, true));
  EXPECT_FALSE(relayout_pays(1, 8192, 576, 576, 1, 1, true, true));
  EXPECT_FALSE(relayout_pays(1, 8192, 192, 576, 1, 1, true, true));
  EXPECT_TRUE(relayout_pays(1, 4096, 4096, 4096, 1, 1, true, false));
  EXPECT_TRUE(relayout_pays(1, 8192, 2048, 2048, 1, 1, true, false));
  EXPECT_TRUE(relayout_pays(1, 8192, 2048, 8192, 1, 1, true, false));
  EXPECT_FALSE(relayout_pays(1, 512, 2048, 128256, 1, 1, true, false));
  EXPECT_FALSE(relayout_pays(1, 4096, 4096, 4096, 1, 1, false, false));  // "tn" already
  // A B kept across products (the LM head's W^T over the loss chunks): a training step's 8192
  // rows pay for the copy of the 1B and 135M heads; one 512-row chunk would not.
  using ops::detail::kept_b_relayout_pays;
  EXPECT_TRUE(kept_b_relayout_pays(1, 8192, 2048, 128256));
  EXPECT_TRUE(kept_b_relayout_pays(1, 8192, 576, 49152));
  EXPECT_FALSE(kept_b_relayout_pays(1, 512, 2048, 128256));
}

TEST(MatmulTiled, VariantNamesAndPlans) {
  Restore restore;
  for (const char* bad : {"fast", "new/", "new/bk32", "new/gm5", "newer", "old/single", ""})
    test::expect_error([&] { ops::detail::set_tiled_variant(bad); },
                       {"tiled GEMM variant", "old", "new", "/bk16"});
  for (const char* good :
       {"old", "new", "new/bk16", "new/single", "new/scalar", "new/rowmajor", "new/warp16x2",
        "new/checked", "new/gm16", "new/bk16/single/scalar/rowmajor/warp16x2/checked"}) {
    ops::detail::set_tiled_variant(good);
    EXPECT_EQ(ops::detail::tiled_variant(), good);
  }
  ops::detail::set_tile_choice(TileChoice::Large);
  ops::detail::set_tiled_variant("new");
  EXPECT_EQ(ops::detail::gemm_plan(1, 300, 300, 64), "tiled 128x128x8");
  ops::detail::set_tiled_variant("old");
  EXPECT_EQ(ops::detail::gemm_plan(1, 300, 300, 64), "tiled 128x128x8 old");
  ops::detail::set_tiled_variant("new/bk16");
  // 16-deep slices of the 128x128 tile take 33,792 bytes in two buffers: one buffer where the
  // device has less (lavapipe: 32 KiB).
  const bool two_fit = vk::Context::get().info().max_shared_memory >= 33792;
  EXPECT_EQ(ops::detail::gemm_plan(1, 300, 300, 64),
            two_fit ? "tiled 128x128x16 new/bk16" : "tiled 128x128x16 new/bk16/single");
}

}  // namespace
}  // namespace vkf
