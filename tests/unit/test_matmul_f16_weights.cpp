// Weights stored in f16 (inference): linear against the double reference (ref::linear) on the
// f16 values themselves, so the only error left is fp32 accumulation, through every kernel path:
// the skinny f16 kernel (M <= 8) with 16-byte loads and its scalar fallback (K % 8 != 0,
// unaligned or transposed activations), its unrolled main loop and tail, several dispatches per
// product, the tiled kernel's f16b variant (M > 8, and N <= 8, which the f32 path would
// transpose; in F16 matmul precision also where the f32 path takes the tensor-core kernel or
// split-K), bias, the precise build, and dx through an f16 weight. Embedding rows of an f16 table
// widen exactly. Bad input is refused.
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "core/autograd.h"
#include "core/dtype.h"
#include "core/launch.h"
#include "ops/embed.h"
#include "ops/matmul.h"
#include "ops/matmul_coopmat.h"
#include "ops/matmul_kernels.h"
#include "ops/matmul_ref.h"
#include "test_util.h"
#include "vk/context.h"

namespace vkf {
namespace {

using test::Rng;

// Random values rounded to f16, as doubles (exactly what the device holds) and as a tensor.
struct HalfMatrix {
  std::vector<double> values;
  Tensor tensor;
};
HalfMatrix half_matrix(Rng& rng, const Shape& shape) {
  const auto v = rng.uniform(static_cast<size_t>(shape_numel(shape)));
  HalfMatrix h;
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    bits[i] = f32_to_f16_bits(static_cast<float>(v[i]));
    h.values.push_back(f16_bits_to_f32(bits[i]));
  }
  h.tensor = Tensor::from_bytes(bits.data(), DType::F16, shape);
  return h;
}

using test::product_atol;

// y = x W^T + b for x [rows, in] (x may be a strided window), W f16 [out, in]. `x_rounded`: the
// kernel rounds x to f16 as it loads it (F16 matmul precision on the tiled kernel).
void check_linear(Rng& rng, int64_t rows, int64_t in, int64_t out, bool bias, int64_t x_pad = 0,
                  const std::string& what = "", bool x_rounded = false) {
  const HalfMatrix w = half_matrix(rng, {out, in});
  const auto x_big = test::as_f32(rng.uniform(static_cast<size_t>(rows * (in + x_pad))));
  std::vector<double> x(static_cast<size_t>(rows * in));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < in; ++c)
      x[static_cast<size_t>(r * in + c)] = x_big[static_cast<size_t>(r * (in + x_pad) + x_pad + c)];
  if (x_rounded)
    for (double& v : x) v = f16_bits_to_f32(f32_to_f16_bits(static_cast<float>(v)));
  const Tensor xt = test::to_gpu(x_big, {rows, in + x_pad}).slice(1, x_pad, x_pad + in);
  std::vector<double> b;
  Tensor bt;
  if (bias) {
    b = test::as_f32(rng.uniform(static_cast<size_t>(out)));
    bt = test::to_gpu(b, {out});
  }
  const Tensor y = ops::linear(xt, w.tensor, bt);
  EXPECT_EQ(y.shape(), (Shape{rows, out}));
  test::expect_close(y, ref::linear(x, w.values, b, rows, in, out), product_atol(in), 1e-5,
                     what + " rows=" + std::to_string(rows) + " in=" + std::to_string(in) +
                         " out=" + std::to_string(out));
}

TEST(MatmulF16Weights, SkinnyKernel) {
  Rng rng(11);
  check_linear(rng, 1, 64, 37, false, 0, "vec8, a partial last workgroup");
  check_linear(rng, 3, 61, 19, true, 0, "K % 8 != 0: halves one by one");
  check_linear(rng, 8, 1040, 21, true, 0, "vec8: unrolled loop and tail");
  check_linear(rng, 3, 64, 40, false, 8, "x a 16-byte aligned window: vec8");
  check_linear(rng, 1, 64, 40, false, 1, "x an unaligned window: scalar");
  check_linear(rng, 1, 2048, 9, false, 0, "long K");
}

// Several weight rows per thread (each activation read once for them), and workgroups that take
// several blocks of rows, change which thread sums what, not the sums: every choice gives the
// bits of one row per thread and one block per workgroup.
TEST(MatmulF16Weights, SkinnyRowsPerThreadKeepTheSums) {
  Rng rng(13);
  for (const auto& [rows, in, out] : {std::tuple<int64_t, int64_t, int64_t>{1, 64, 37},
                                      {3, 1040, 70},
                                      {8, 64, 300},
                                      {1, 4104, 37},   // three rounds of loads, the last partial
                                      {2, 37, 45}}) {  // K % 8 != 0: the element-wise loads
    const HalfMatrix w = half_matrix(rng, {out, in});
    const auto x = test::as_f32(rng.uniform(static_cast<size_t>(rows * in)));
    const auto b = test::as_f32(rng.uniform(static_cast<size_t>(out)));
    const Tensor xt = test::to_gpu(x, {rows, in}), bt = test::to_gpu(b, {out});
    std::vector<double> one_row;
    ops::detail::set_skinny_f16_k_split(1);  // whole rows per thread group (split: below)
    for (const uint32_t rpt : {1u, 2u, 4u}) {
      for (const uint32_t groups : {0u, 1u, 3u}) {  // workgroups taking several blocks of rows
        // Odd groups: the shared-memory trees where shuffles could end them (the same bits).
        ops::detail::set_skinny_f16_shuffle_tree(groups % 2 == 0);
        ops::detail::set_skinny_f16_rows_per_thread(rpt);
        ops::detail::set_skinny_f16_max_groups(groups);
        const std::vector<double> got = ops::linear(xt, w.tensor, bt).to_double();
        if (rpt == 1 && groups == 0) {
          one_row = got;
          test::expect_close(got, ref::linear(x, w.values, b, rows, in, out), product_atol(in),
                             1e-5, "one row per thread");
        } else {
          EXPECT_EQ(got, one_row) << rpt << " rows per thread, " << groups
                                  << " workgroups at most, rows=" << rows << " out=" << out;
        }
      }
    }
    ops::detail::reset_skinny_f16_settings();
  }
  // The automatic choice: one row for one activation row or scalar loads, two for one row staged
  // in shared memory (a folded norm), else up to 4 while the grid keeps 128 workgroups of 8 rows
  // each.
  EXPECT_EQ(ops::detail::skinny_f16_rows_per_thread(1, 8192, true), 1u);
  EXPECT_EQ(ops::detail::skinny_f16_rows_per_thread(1, 8192, true, true), 2u);
  EXPECT_EQ(ops::detail::skinny_f16_rows_per_thread(1, 512, true, true), 2u);
  EXPECT_EQ(ops::detail::skinny_f16_rows_per_thread(1, 8192, false, true), 1u);
  EXPECT_EQ(ops::detail::skinny_f16_rows_per_thread(8, 8192, false), 1u);
  EXPECT_EQ(ops::detail::skinny_f16_rows_per_thread(8, 8192, true), 4u);
  EXPECT_EQ(ops::detail::skinny_f16_rows_per_thread(8, 2048, true), 2u);
  EXPECT_EQ(ops::detail::skinny_f16_rows_per_thread(8, 512, true), 1u);
  test::expect_error([] { ops::detail::set_skinny_f16_rows_per_thread(3); },
                     {"rows per thread", "1, 2 or 4"});
}

// Rows shared by several groups of threads, each summing a slice of K: close to the reference
// for every split (slices of uneven length, the last short or empty), and the same bits for a
// given split whatever the workgroups and trees. One weight row per thread only: with several
// (or scalar loads) the split does not apply.
TEST(MatmulF16Weights, SkinnyKSplit) {
  Rng rng(14);
  for (const auto& [rows, in, out] : {std::tuple<int64_t, int64_t, int64_t>{1, 8192, 21},
                                      {1, 2048, 19},  // half-round slices at two rows per thread
                                      {1, 4104, 37},  // 513 groups of 8: uneven slices
                                      {3, 24, 30},    // 3 groups: some slices empty
                                      {1, 37, 9}}) {  // K % 8 != 0: scalar loads, no split
    const HalfMatrix w = half_matrix(rng, {out, in});
    const auto x = test::as_f32(rng.uniform(static_cast<size_t>(rows * in)));
    const auto b = test::as_f32(rng.uniform(static_cast<size_t>(out)));
    const Tensor xt = test::to_gpu(x, {rows, in}), bt = test::to_gpu(b, {out});
    const auto want = ref::linear(x, w.values, b, rows, in, out);
    for (const uint32_t split : {1u, 2u, 4u, 8u}) {
      ops::detail::set_skinny_f16_k_split(split);
      std::vector<double> first;
      // One activation row: also two weight rows per thread (the same slices, so the same bits).
      for (const uint32_t rpt :
           rows == 1 ? std::vector<uint32_t>{1, 2} : std::vector<uint32_t>{1}) {
        ops::detail::set_skinny_f16_rows_per_thread(rpt);
        for (const uint32_t groups : {0u, 1u, 3u}) {
          ops::detail::set_skinny_f16_shuffle_tree(groups % 2 == 0);
          ops::detail::set_skinny_f16_max_groups(groups);
          const std::vector<double> got = ops::linear(xt, w.tensor, bt).to_double();
          const std::string what = "split " + std::to_string(split) + ", " + std::to_string(rpt) +
                                   " rows per thread, " + std::to_string(groups) +
                                   " workgroups at most, " + std::to_string(rows) + "x" +
                                   std::to_string(out) + "x" + std::to_string(in);
          if (first.empty()) {
            first = got;
            test::expect_close(got, want, product_atol(in), 1e-5, what);
          } else {
            EXPECT_EQ(got, first) << what;
          }
        }
      }
    }
    ops::detail::reset_skinny_f16_settings();
  }
  // The rule: slices of at least one round (2048 halves at one row per thread, 1024 at two for
  // one plain activation row), at most 4; never with scalar loads, or several rows per thread for
  // several activation rows. One plain activation row of K >= 2048 takes two rows per thread and
  // the split; a staged one keeps whole rounds (K = 2048: no split), and the gated variant one row.
  EXPECT_EQ(ops::detail::skinny_f16_k_split(8192, 2, true, 1), 4u);
  EXPECT_EQ(ops::detail::skinny_f16_k_split(8192, 2, true, 2), 1u);
  EXPECT_EQ(ops::detail::skinny_f16_k_split(2048, 2, true, 1), 2u);
  EXPECT_EQ(ops::detail::skinny_f16_k_split(2048, 2, true, 1, true), 1u);
  EXPECT_EQ(ops::detail::skinny_f16_k_split(1024, 2, true, 1), 1u);
  EXPECT_EQ(ops::detail::skinny_f16_rows_per_thread(1, 2048, true, false, 8192), 2u);
  EXPECT_EQ(ops::detail::skinny_f16_rows_per_thread(1, 2048, true, false, 2048), 2u);
  EXPECT_EQ(ops::detail::skinny_f16_rows_per_thread(1, 2048, true, false, 1024), 1u);
  EXPECT_EQ(ops::detail::skinny_f16_rows_per_thread(1, 2048, true, false, 2048, true), 1u);
  {
    const auto plan = ops::detail::plan_skinny_f16(1, 2048, 2048, true, 0, false);
    EXPECT_EQ(plan.rows_per_thread, 2u);
    EXPECT_EQ(plan.k_split, 2u);
    EXPECT_EQ(plan.rows_per_block(), 8u);
    EXPECT_EQ(ops::detail::plan_skinny_f16(1, 2048, 8192, true, 0, true).k_split, 1u);
  }
  // Without the half-round slices, K = 2048 neither splits nor takes two rows; K = 8192 does both.
  ops::detail::set_skinny_f16_half_round_split(false);
  EXPECT_EQ(ops::detail::skinny_f16_rows_per_thread(1, 2048, true, false, 2048), 1u);
  EXPECT_EQ(ops::detail::skinny_f16_k_split(2048, 2, true, 1), 1u);
  EXPECT_EQ(ops::detail::skinny_f16_k_split(8192, 2, true, 1), 4u);
  ops::detail::reset_skinny_f16_settings();
  EXPECT_EQ(ops::detail::skinny_f16_k_split(8192, 1, true), 4u);
  EXPECT_EQ(ops::detail::skinny_f16_k_split(4096, 1, true), 2u);
  EXPECT_EQ(ops::detail::skinny_f16_k_split(2048, 1, true), 1u);
  EXPECT_EQ(ops::detail::skinny_f16_k_split(8192, 1, false), 1u);
  test::expect_error([] { ops::detail::set_skinny_f16_k_split(3); }, {"k split", "1, 2, 4 or 8"});
}

TEST(MatmulF16Weights, TiledKernelVariant) {
  Rng rng(12);
  check_linear(rng, 9, 33, 17, true, 0, "M > 8");
  check_linear(rng, 20, 40, 5, true, 0, "N <= 8 stays on the f16 weight");
  check_linear(rng, 70, 130, 67, false, 3, "several tiles, strided x");
}

// The tensor-core kernel and split-K read an f32 B: in F16 matmul precision, with the tensor-core
// kernel available (its emulated build, on any device) and split-K forced, a product that would
// take them still reads an f16 weight through the tiled kernel's f16b variant, which rounds x.
TEST(MatmulF16Weights, F16PrecisionKeepsF16WeightOnTiledKernel) {
  struct Restore {
    ~Restore() {
      set_matmul_precision(MatmulPrecision::F32);
      ops::detail::set_coopmat_emulation(false);
      ops::detail::set_split_k(0);
    }
  } restore;
  set_matmul_precision(MatmulPrecision::F16);
  ops::detail::set_coopmat_emulation(true);
  ASSERT_EQ(ops::detail::gemm_plan(1, 20, 24, 64).rfind("coopmat", 0), 0u)
      << "an f32 product of this shape should take the tensor-core kernel: "
      << ops::detail::gemm_plan(1, 20, 24, 64);
  Rng rng(15);
  check_linear(rng, 20, 64, 24, true, 0, "tensor-core kernel available", true);
  ops::detail::set_split_k(4);
  check_linear(rng, 20, 64, 24, true, 0, "split-K forced", true);
}

TEST(MatmulF16Weights, BatchesGridSplitPrecise) {
  Rng rng(13);
  // [3, 1, in] rows merge into one skinny product of 3 rows.
  const HalfMatrix w = half_matrix(rng, {29, 24});
  const auto x = test::as_f32(rng.uniform(3 * 24));
  const auto want = ref::linear(x, w.values, {}, 3, 24, 29);
  test::expect_close(ops::linear(test::to_gpu(x, {3, 1, 24}), w.tensor), want, product_atol(24),
                     1e-5, "3-D x");
  // Several dispatches per product.
  ops::detail::set_grid_limit(2);
  test::expect_close(ops::linear(test::to_gpu(x, {3, 24}), w.tensor), want, product_atol(24), 1e-5,
                     "grid split");
  ops::detail::set_grid_limit(65535);
  // The precise build accumulates in double: about one rounding per output.
  if (vk::Context::get().info().float64_arithmetic) {
    set_math_mode(MathMode::Precise);
    test::expect_close(ops::linear(test::to_gpu(x, {3, 24}), w.tensor), want, 1e-7, 1e-7,
                       "precise");
    const auto x9 = test::as_f32(rng.uniform(9 * 24));
    test::expect_close(ops::linear(test::to_gpu(x9, {9, 24}), w.tensor),
                       ref::linear(x9, w.values, {}, 9, 24, 29), 1e-7, 1e-7, "precise tiled");
    set_math_mode(MathMode::Fast);
  }
  // Transposed activations (opA read column-wise) through the gemm entry point.
  const auto xs = test::as_f32(rng.uniform(24 * 3));  // stored [K, M]
  std::vector<double> xt(3 * 24);
  for (int m = 0; m < 3; ++m)
    for (int k = 0; k < 24; ++k)
      xt[static_cast<size_t>(m * 24 + k)] = xs[static_cast<size_t>(k * 3 + m)];
  Tensor c = Tensor::empty({3, 29});
  ops::detail::gemm(ops::detail::describe(test::to_gpu(xs, {24, 3}))->transposed(),
                    ops::detail::describe(w.tensor)->transposed(), *ops::detail::describe(c), 1.0f,
                    0.0f);
  test::expect_close(c, ref::linear(xt, w.values, {}, 3, 24, 29), product_atol(24), 1e-5,
                     "transposed opA");
}

TEST(MatmulF16Weights, InputGradientThroughF16Weight) {
  Rng rng(14);
  const HalfMatrix w = half_matrix(rng, {13, 20});
  const auto x = test::as_f32(rng.uniform(3 * 20));
  const auto dy = test::as_f32(rng.uniform(3 * 13));
  const auto grads =
      test::gpu_grads([&](std::vector<Tensor>& in) { return ops::linear(in[0], w.tensor); },
                      {test::to_gpu(x, {3, 20})}, test::to_gpu(dy, {3, 13}));
  std::vector<double> dx, dw, db;
  ref::linear_backward(x, w.values, dy, 3, 20, 13, false, dx, dw, db);
  test::expect_close(grads[0], dx, product_atol(13), 1e-5, "dx = dy W with W in f16");
}

TEST(MatmulF16Weights, EmbeddingTable) {
  Rng rng(15);
  const HalfMatrix w = half_matrix(rng, {11, 7});
  const std::vector<int32_t> ids = {3, 0, 10, 3, 11};  // 11 is outside the table: a zero row
  const auto got = ops::embedding(w.tensor, Tensor::from_host_i32(ids, {5})).to_double();
  for (size_t i = 0; i < ids.size(); ++i)
    for (size_t c = 0; c < 7; ++c) {
      const double want = ids[i] < 11 ? w.values[static_cast<size_t>(ids[i]) * 7 + c] : 0.0;
      EXPECT_EQ(got[i * 7 + c], want) << "token " << i << " column " << c;
    }
}

TEST(MatmulF16Weights, BadInput) {
  Rng rng(16);
  const HalfMatrix w = half_matrix(rng, {4, 6});
  test::expect_error(
      [&] {
        ops::linear(Tensor::zeros({2, 6}, DType::F16), w.tensor);
      },
      {"linear", "x", "f32"});
  test::expect_error(
      [&] {
        ops::linear(Tensor::zeros({2, 6}), Tensor::zeros({4, 6}, DType::I32));
      },
      {"weight", "f16"});
  test::expect_error([&] { ops::linear(Tensor::zeros({2, 5}), w.tensor); }, {"input features"});
  // An f16 weight carries no gradient.
  Tensor copy = w.tensor.clone();
  test::expect_error([&] { copy.set_requires_grad(true); }, {"f32"});
}

}  // namespace
}  // namespace vkf
