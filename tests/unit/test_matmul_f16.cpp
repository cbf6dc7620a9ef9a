// Mixed-precision (MatmulPrecision::F16) matrix products against a CPU reference in double on
// f16-rounded operands (rounded with core/dtype's f32_to_f16_bits), within the error bound of
// fp32 accumulation, 4 K 2^-24 sum_k |a||b| per element -- far below what skipping the rounding
// costs, which is also asserted. Covers every kernel path in F16 mode: the portable tiled and
// skinny kernels (the rounding specialization) and, on a device with NV cooperative matrices, the
// tensor-core kernel in every tile variant and both f16 conversions; every transpose combination,
// odd sizes, batches with a shared operand, alpha/beta/bias into strided outputs, split-K, the
// rounding of edge values bit for bit (ties, overflow to infinity, subnormals), determinism. The
// tensor-core kernel's own logic (staging, fragment layouts, epilogue) also runs everywhere through
// its emulated build. The workgroup-scope kernel has its own file, test_matmul_workgroup.cpp.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "core/autograd.h"
#include "core/dtype.h"
#include "core/launch.h"
#include "f16_product_check.h"
#include "ops/matmul.h"
#include "ops/matmul_coopmat.h"
#include "ops/matmul_kernels.h"
#include "ops/matmul_ref.h"
#include "ops/matmul_relayout.h"
#include "test_util.h"
#include "vk/context.h"

namespace vkf {
namespace {

using ops::matmul;
using ops::matmul_into;
using ops::detail::F16Convert;
using test::Rng;

using namespace test;  // f16_product_check.h

// Values around f16 rounding decisions: f16 values (every exponent, subnormals included, with
// the lowest and highest mantissas and every 13th between), the midpoint to the next f16 value
// (a tie, which goes to the even neighbour), one f32 ulp either side of it, and the specials
// (overflow past 65504, infinities, NaN, f32 subnormals, values below half the smallest f16
// subnormal). Signs alternate.
std::vector<double> edge_values() {
  std::vector<double> v;
  auto add = [&](float x) { v.push_back(v.size() % 2 ? -static_cast<double>(x) : x); };
  for (uint32_t h = 0; h < 0x7c00u; ++h) {
    const uint32_t mantissa = h & 0x3ffu;
    if (mantissa > 2 && mantissa < 0x3fd && mantissa % 13 != 0) continue;
    const float lo = f16_bits_to_f32(static_cast<uint16_t>(h));
    const float hi = h + 1 < 0x7c00u ? f16_bits_to_f32(static_cast<uint16_t>(h + 1)) : 65536.0f;
    const float mid = 0.5f * (lo + hi);  // exact: f16 values have 11 significant bits
    add(lo);
    add(mid);
    add(std::nextafter(mid, 0.0f));
    add(std::nextafter(mid, 1e38f));
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {65504.0f, 65519.996f, 65520.0f, 65536.0f, 1e5f, 3.4e38f, inf,
                  std::numeric_limits<float>::quiet_NaN(), 1e-45f, 1.1754942e-38f, 1.1754944e-38f,
                  2.9802322e-8f, 2.9802326e-8f, 2.9802319e-8f, 1e-30f})
    for (float sign : {1.0f, -1.0f}) v.push_back(sign * x);
  return v;
}

// Each result got[i] must be exactly f16_round(source(i)), one operand element: the products
// below multiply every element by 1 and add only exact zeros.
void expect_f16_of(const std::vector<double>& got, const std::function<double(size_t)>& source,
                   const std::string& what) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = f16_round(source(i));
    if (std::isnan(want) ? !std::isnan(got[i]) : got[i] != want) {
      if (bad++ == 0) first = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size()
                     << " results differ from f32_to_f16_bits rounding; first: "
                     << (got.empty() ? 0.0 : source(first)) << " gave "
                     << (got.empty() ? 0.0 : got[first]) << ", want "
                     << (got.empty() ? 0.0 : f16_round(source(first)));
}

// The edge values through every operand read of every kernel: down A and along B with K = 1
// (scalar reads), rows of 8 contiguous elements against one-hot matrices (the vec4 reads of the
// tensor-core and skinny kernels; finite values only, since inf * 0 is NaN), and the skinny
// kernel's staged A rows.
void check_edge_values(const std::vector<double>& values, const std::string& path) {
  const int64_t count = static_cast<int64_t>(values.size());
  auto at = [&](int64_t i) { return i < count ? values[static_cast<size_t>(i)] : 0.0; };
  auto plan = [](int64_t m, int64_t n, int64_t k) {
    return " [" + ops::detail::gemm_plan(1, m, n, k) + "]";
  };
  const auto ones = [](int64_t n) { return std::vector<double>(static_cast<size_t>(n), 1.0); };
  // One-hot [k, n]: column j has its 1 in row j % k.
  auto one_hot = [](int64_t k, int64_t n) {
    std::vector<double> v(static_cast<size_t>(k * n), 0.0);
    for (int64_t j = 0; j < n; ++j) v[static_cast<size_t>((j % k) * n + j)] = 1.0;
    return v;
  };

  Tensor c = matmul(test::to_gpu(values, {count, 1}), test::to_gpu(ones(9), {1, 9}));
  expect_f16_of(
      c.to_double(), [&](size_t i) { return at(static_cast<int64_t>(i) / 9); },
      path + ": down A" + plan(count, 9, 1));
  c = matmul(test::to_gpu(ones(9), {9, 1}), test::to_gpu(values, {1, count}));
  expect_f16_of(
      c.to_double(), [&](size_t i) { return at(static_cast<int64_t>(i) % count); },
      path + ": along B" + plan(9, count, 1));
  c = matmul(test::to_gpu(ones(1), {1, 1}), test::to_gpu(values, {1, count}));
  expect_f16_of(
      c.to_double(), [&](size_t i) { return at(static_cast<int64_t>(i)); },
      path + ": along B" + plan(1, count, 1));

  std::vector<double> finite;
  for (double v : values)
    if (std::isfinite(f16_round(v))) finite.push_back(v);
  const int64_t rows = static_cast<int64_t>(finite.size() + 7) / 8;
  finite.resize(static_cast<size_t>(rows * 8), 0.0);
  const Tensor blocks = test::to_gpu(finite, {rows, 8});  // rows of 8 contiguous values
  auto block = [&](int64_t r, int64_t k) { return finite[static_cast<size_t>(r * 8 + k)]; };
  // A [rows, 8] times one-hot [8, 16]: C(r, j) = A(r, j % 8).
  c = matmul(blocks, test::to_gpu(one_hot(8, 16), {8, 16}));
  expect_f16_of(
      c.to_double(),
      [&](size_t i) { return block(static_cast<int64_t>(i) / 16, static_cast<int64_t>(i) % 8); },
      path + ": A rows of 8" + plan(rows, 16, 8));
  // One-hot [m, 8] (row r has its 1 in column r % 8) times B^T, B stored [rows, 8]:
  // C(r, n) = B(r % 8, n) = stored(n, r % 8); m = 8 takes the skinny kernel, 16 the tiled one.
  for (int64_t m : {8, 16}) {
    std::vector<double> a(static_cast<size_t>(m * 8), 0.0);
    for (int64_t r = 0; r < m; ++r) a[static_cast<size_t>(r * 8 + r % 8)] = 1.0;
    c = matmul(test::to_gpu(a, {m, 8}), blocks, false, true);
    expect_f16_of(
        c.to_double(),
        [&](size_t i) {
          return block(static_cast<int64_t>(i) % rows, (static_cast<int64_t>(i) / rows) % 8);
        },
        path + ": B^T rows of 8" + plan(m, rows, 8));
  }
  // The skinny kernel's staged A rows, 8 values at a time (a sample of the values).
  std::vector<double> sample;
  for (size_t i = 0; i < values.size(); i += 509) sample.push_back(values[i]);
  for (size_t i = values.size() - 32; i < values.size(); ++i) sample.push_back(values[i]);
  for (size_t i = 0; i + 8 <= sample.size(); i += 8) {
    const std::vector<double> eight(sample.begin() + static_cast<long>(i),
                                    sample.begin() + static_cast<long>(i) + 8);
    c = matmul(test::to_gpu(eight, {8, 1}), test::to_gpu(ones(40), {1, 40}));
    expect_f16_of(
        c.to_double(), [&](size_t j) { return eight[j / 40]; },
        path + ": skinny A" + plan(8, 40, 1));
  }
}

TEST(MatmulF16, RoundsOperandsExactlyAsHost) {
  const auto values = edge_values();
  for (const auto& path : path_choices()) {
    F16Scope scope(path);
    check_edge_values(values, path);
  }
}

struct Mnk {
  int64_t m, n, k;
};

TEST(MatmulF16, EveryTransposeOnOddSizes) {
  Rng rng(101);
  for (const auto& path : path_choices()) {
    F16Scope scope(path);
    for (const Mnk& d : {Mnk{37, 53, 61}, Mnk{130, 129, 40}})
      for (int t = 0; t < 4; ++t)
        check_product(rng, {}, {1, d.m, d.n, d.k, (t & 1) != 0, (t & 2) != 0, false}, path,
                      d.k >= 40);
  }
  // The portable kernel's other tile size.
  F16Scope scope("off");
  ops::detail::set_tile_choice(ops::detail::TileChoice::Medium);
  for (int t = 0; t < 4; ++t)
    check_product(rng, {}, {1, 37, 53, 61, (t & 1) != 0, (t & 2) != 0, false}, "off medium", true);
  ops::detail::set_tile_choice(ops::detail::TileChoice::Auto);
}

TEST(MatmulF16, SkinnyShapes) {
  Rng rng(102);
  for (const auto& path : path_choices()) {
    F16Scope scope(path);
    // M = 1 in every layout; M = 8 (A^T staged) and N = 5 (the transposed problem) in the
    // layouts of a linear layer's forward (x W^T) and input gradient.
    for (int t = 0; t < 4; ++t)
      check_product(rng, {}, {1, 1, 61, 300, (t & 1) != 0, (t & 2) != 0, false}, path, true);
    check_product(rng, {}, {1, 8, 33, 64, true, true, false}, path, true);
    check_product(rng, {}, {1, 8, 33, 64, false, true, false}, path, true);
    check_product(rng, {}, {1, 61, 5, 64, false, true, false}, path, true);
    check_product(rng, {}, {1, 61, 5, 64, false, false, false}, path, true);
  }
}

TEST(MatmulF16, BatchesAndSharedOperands) {
  Rng rng(103);
  for (const auto& path : path_choices()) {
    F16Scope scope(path);
    for (int t = 0; t < 4; ++t) {
      const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
      check_product(rng, {2, 3}, {1, 13, 17, 19, ta, tb, false}, path);
      check_product(rng, {2, 5}, {1, 21, 17, 19, ta, tb, true}, path);  // shared B
      check_product(rng, {4}, {1, 1, 29, 23, ta, tb, true}, path);      // shared B, skinny
    }
    // A shared by every batch entry (batch stride 0), through gemm() directly.
    const int64_t batch = 3, m = 19, n = 23, k = 27;
    const auto a = test::as_f32(rng.uniform(m * k));
    const auto b = test::as_f32(rng.uniform(batch * k * n));
    Tensor ta = test::to_gpu(a, {m, k}), tb = test::to_gpu(b, {batch, k, n});
    Tensor c = Tensor::empty({batch, m, n});
    ops::detail::gemm({ta, 1, m, k, 0, k, 1}, {tb, batch, k, n, k * n, n, 1},
                      {c, batch, m, n, m * n, n, 1}, 1.0f, 0.0f);
    std::vector<double> a_rep;  // the shared A repeated, for the batched reference
    for (int64_t z = 0; z < batch; ++z) a_rep.insert(a_rep.end(), a.begin(), a.end());
    expect_within(c.to_double(), expect_f16(a_rep, b, {batch, m, n, k}), path + ": shared A");
  }
}

// out = alpha * op(a) op(b) + beta * out + bias into a column window of a wider matrix (other
// columns must stay), and into a transposed (column-major) view.
TEST(MatmulF16, AlphaBetaBiasIntoStridedOutputs) {
  Rng rng(104);
  for (const auto& path : path_choices()) {
    F16Scope scope(path);
    for (const Mnk& d : {Mnk{37, 61, 13}, Mnk{3, 40, 29}, Mnk{45, 5, 16}, Mnk{70, 90, 50}}) {
      for (int t = 0; t < 4; ++t) {
        const ref::MatmulShape s{1, d.m, d.n, d.k, (t & 1) != 0, (t & 2) != 0, false};
        const auto a = test::as_f32(rng.uniform(s.a_size()));
        const auto b = test::as_f32(rng.uniform(s.b_size()));
        const auto bias = test::as_f32(rng.uniform(s.n));
        const int64_t width = s.n + 7;
        const auto before = test::as_f32(rng.uniform(s.m * width));
        const Tensor ta = test::to_gpu(a, s.a_shape({})), tb = test::to_gpu(b, s.b_shape({}));
        for (const auto& [alpha, beta, with_bias] :
             {std::tuple{1.0f, 1.0f, false}, std::tuple{0.5f, 0.25f, true},
              std::tuple{2.0f, 0.0f, true}}) {
          Tensor wide = test::to_gpu(before, {s.m, width});
          if (beta == 0.0f) wide.slice(1, 3, 3 + s.n).fill_(NAN);  // never read with beta == 0
          matmul_into(ta, tb, s.trans_a, s.trans_b, wide.slice(1, 3, 3 + s.n), alpha, beta,
                      with_bias ? test::to_gpu(bias, {s.n}) : Tensor());
          std::vector<double> window(s.m * s.n);
          for (int64_t m = 0; m < s.m; ++m)
            for (int64_t n = 0; n < s.n; ++n) window[m * s.n + n] = before[m * width + 3 + n];
          Expected e = expect_f16(a, b, s, alpha);
          add_epilogue(e, beta, window, with_bias ? bias : std::vector<double>(), s.n);
          // The whole wide matrix: the window as expected, the rest untouched.
          Expected whole{before, std::vector<double>(before.size(), 0.0)};
          for (int64_t m = 0; m < s.m; ++m)
            for (int64_t n = 0; n < s.n; ++n) {
              whole.value[m * width + 3 + n] = e.value[m * s.n + n];
              whole.tol[m * width + 3 + n] = e.tol[m * s.n + n];
            }
          for (auto& tol : whole.tol) tol = std::max(tol, 1e-300);
          expect_within(wide.to_double(), whole,
                        describe(s, path) + " alpha " + std::to_string(alpha) + " beta " +
                            std::to_string(beta) + (with_bias ? " bias" : ""));
        }
      }
    }
    // Into a transposed view of a batched output (C column-major), accumulating, with a bias.
    const ref::MatmulShape s{6, 33, 20, 9};
    const auto a = test::as_f32(rng.uniform(s.a_size()));
    const auto b = test::as_f32(rng.uniform(s.b_size()));
    const auto bias = test::as_f32(rng.uniform(s.n));
    Tensor out_t = Tensor::full({2, 3, s.n, s.m}, 1.0f);
    matmul_into(test::to_gpu(a, {2, 3, s.m, s.k}), test::to_gpu(b, {2, 3, s.k, s.n}), false, false,
                out_t.transpose(2, 3), 1.0f, 1.0f, test::to_gpu(bias, {s.n}));
    Expected e = expect_f16(a, b, s);
    add_epilogue(e, 1.0, std::vector<double>(e.value.size(), 1.0), bias, s.n);
    Expected e_t{e.value, e.tol};  // stored [z][n][m]
    for (int64_t z = 0; z < s.batch; ++z)
      for (int64_t m = 0; m < s.m; ++m)
        for (int64_t n = 0; n < s.n; ++n) {
          e_t.value[(z * s.n + n) * s.m + m] = e.value[(z * s.m + m) * s.n + n];
          e_t.tol[(z * s.n + n) * s.m + m] = e.tol[(z * s.m + m) * s.n + n];
        }
    expect_within(out_t.to_double(), e_t, path + ": into a transposed view");
  }
}

TEST(MatmulF16, SplitK) {
  Rng rng(105);
  for (const auto& path : path_choices()) {
    for (int64_t chunks : {2, 4}) {
      F16Scope scope(path);
      ops::detail::set_split_k(chunks);
      for (int t = 0; t < 4; ++t)
        check_product(rng, {}, {1, 37, 61, 64, (t & 1) != 0, (t & 2) != 0, false},
                      path + " split-K " + std::to_string(chunks), true);
      // With alpha, beta and a bias (applied once, by the reduction).
      const ref::MatmulShape s{1, 29, 35, 96};
      const auto a = test::as_f32(rng.uniform(s.a_size()));
      const auto b = test::as_f32(rng.uniform(s.b_size()));
      const auto bias = test::as_f32(rng.uniform(s.n));
      const auto before = test::as_f32(rng.uniform(s.m * s.n));
      Tensor out = test::to_gpu(before, {s.m, s.n});
      matmul_into(test::to_gpu(a, {s.m, s.k}), test::to_gpu(b, {s.k, s.n}), false, false, out, 0.5f,
                  0.75f, test::to_gpu(bias, {s.n}));
      Expected e = expect_f16(a, b, s, 0.5);
      add_epilogue(e, 0.75, before, bias, s.n);
      expect_within(out.to_double(), e, path + " split-K epilogue");
    }
  }
}

// Operands past 65504 become infinities; f16 subnormals survive (flushing them to zero would
// change these results completely).
TEST(MatmulF16, OverflowAndSubnormals) {
  Rng rng(106);
  for (const auto& path : path_choices()) {
    F16Scope scope(path);
    for (const Mnk& d : {Mnk{20, 30, 17}, Mnk{2, 30, 17}}) {
      const ref::MatmulShape s{1, d.m, d.n, d.k};
      auto a = test::as_f32(rng.uniform(s.a_size()));
      auto b = test::as_f32(rng.uniform(s.b_size(), 0.5, 1.0));  // positive: no inf - inf
      a[0] = 65520.0;                                            // rounds to +inf: row 0 is +inf
      a[s.k] = -7e4;                                             // row 1: -inf
      a[2] = 65519.0;                                            // stays finite (65504)
      const auto got = matmul(test::to_gpu(a, {s.m, s.k}), test::to_gpu(b, {s.k, s.n})).to_double();
      const Expected e = expect_f16(a, b, s);
      for (int64_t n = 0; n < s.n; ++n) {
        ASSERT_TRUE(std::isinf(e.value[n]) && e.value[n] > 0);
        ASSERT_TRUE(std::isinf(e.value[s.n + n]) && e.value[s.n + n] < 0);
      }
      expect_within(got, e, describe(s, path) + " overflow");

      // Operands in the f16 subnormal range (below 2^-14 = 6.1e-5).
      const auto tiny = test::as_f32(rng.uniform(s.a_size(), -6e-5, 6e-5));
      const auto bb = test::as_f32(rng.uniform(s.b_size()));
      const auto got_tiny =
          matmul(test::to_gpu(tiny, {s.m, s.k}), test::to_gpu(bb, {s.k, s.n})).to_double();
      const Expected et = expect_f16(tiny, bb, s);
      expect_within(got_tiny, et, describe(s, path) + " subnormal operands");
      expect_rounding_visible(got_tiny, et, ref::matmul(tiny, bb, s),
                              describe(s, path) + " subnormal operands");
      EXPECT_GT(test::max_abs_diff(got_tiny, std::vector<double>(got_tiny.size(), 0.0)), 1e-5)
          << "subnormal operands were flushed to zero";
    }
  }
}

// Every tensor-core tile variant and f16 conversion the device supports, on shapes that leave
// partial tiles in every dimension, batches, a grid split into several dispatches, and the
// exact rounding of edge values. Skipped on devices without NV cooperative matrices.
TEST(MatmulF16, EveryCoopmatTileAndConversion) {
  const auto support = ops::detail::coopmat_support();
  if (!support.unsupported.empty())
    GTEST_SKIP() << "no cooperative matrices: " << support.unsupported;
  std::vector<F16Convert> converts = {F16Convert::Exact};
  if (support.hardware_convert) converts.push_back(F16Convert::Hardware);
  Rng rng(107);
  const auto values = edge_values();
  int variants_run = 0;
  for (const auto& tile : ops::detail::coopmat_tiles()) {
    if (const auto why = ops::detail::coopmat_tile_unfit(tile, support); !why.empty()) {
      ADD_FAILURE() << "tile " << tile.name() << " cannot run here: " << why;
      continue;
    }
    for (F16Convert convert : converts) {
      F16Scope scope(tile.name(), convert);
      const std::string path = "coopmat " + tile.name() + " " + ops::detail::f16_convert_name();
      ASSERT_EQ(ops::detail::gemm_plan(1, 300, 300, 64).rfind("coopmat " + tile.name(), 0), 0u)
          << ops::detail::gemm_plan(1, 300, 300, 64);
      ++variants_run;
      for (int t = 0; t < 4; ++t) {
        const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
        check_product(rng, {}, {1, 200, 257, 190, ta, tb, false}, path, false);
        check_product(rng, {}, {1, 37, 53, 61, ta, tb, false}, path, true);
        check_product(rng, {3}, {1, 65, 40, 33, ta, tb, false}, path);
        check_product(rng, {2}, {1, 70, 19, 24, ta, tb, true}, path);
      }
      check_edge_values(values, path);
      ops::detail::set_grid_limit(2);  // 600 x 700 outputs: several dispatches in x and y
      check_product(rng, {}, {1, 600, 700, 20, false, true, false}, path + " grid limit 2");
    }
  }
  EXPECT_GT(variants_run, 0);
}

void relaid_f16_products(bool emulated);

// The f16 operand copies made transposed into the tensor-core kernel's faster layout
// (matmul_relayout.h, forced on): bitwise the product of the plain copies, on the emulated kernel
// (every device) -- every transpose, ragged sizes, a strided operand, a batch -- and the
// transposing conversion ran (seen in the kernel profile where the device has timestamps).
TEST(MatmulF16, RelaidF16OperandsChangeNoBit) {
  // Emulated everywhere; where the device has cooperative matrices, on them as well.
  for (const bool emulated : {true, false}) {
    if (!emulated && !coopmat_supported()) continue;
    SCOPED_TRACE(emulated ? "emulated" : "tensor cores");
    relaid_f16_products(emulated);
  }
}

void relaid_f16_products(bool emulated) {
  Rng rng(113);
  F16Scope scope;
  ops::detail::set_coopmat_emulation(emulated);
  ASSERT_EQ(ops::detail::gemm_plan(1, 36, 52, 60).rfind("coopmat ", 0), 0u)
      << ops::detail::gemm_plan(1, 36, 52, 60);
  struct Guard {
    ~Guard() { ops::detail::set_tiled_relayout(ops::detail::RelayoutChoice::Auto); }
  } guard;
  auto& stream = vk::Context::get().stream();
  const bool timestamps = vk::Context::get().info().timestamps;
  auto both = [&](const std::function<Tensor()>& product, bool relaid, const std::string& what) {
    ops::detail::set_tiled_relayout(ops::detail::RelayoutChoice::Off);
    const Tensor plain = product();
    ops::detail::set_tiled_relayout(ops::detail::RelayoutChoice::Always);
    stream.set_profiling(false);
    stream.set_profiling(true);
    const Tensor fast = product();
    bool transposed = false;
    for (const auto& k : stream.profile())
      transposed = transposed || k.label == "matmul_transpose_f16";
    stream.set_profiling(false);
    if (timestamps) {
      EXPECT_EQ(transposed, relaid) << what;
    }
    test::expect_bitwise_equal(fast, plain, what);
  };
  for (int t = 0; t < 4; ++t) {
    const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
    const ref::MatmulShape s{1, 36, 52, 60, ta, tb, false};
    const Tensor a =
        test::to_gpu(test::as_f32(rng.uniform(s.a_size())), ta ? Shape{60, 36} : Shape{36, 60});
    const Tensor b =
        test::to_gpu(test::as_f32(rng.uniform(s.b_size())), tb ? Shape{52, 60} : Shape{60, 52});
    both([&] { return ops::matmul(a, b, ta, tb); }, !ta || tb,
         std::string("layout ") + (ta ? "t" : "n") + (tb ? "t" : "n"));
  }
  // A strided window of a wider matrix, and a batch of 3 against a batch of B^T.
  const Tensor wide = test::to_gpu(test::as_f32(rng.uniform(44 * 70)), {44, 70});
  const Tensor w = test::to_gpu(test::as_f32(rng.uniform(28 * 64)), {28, 64});
  both([&] { return ops::matmul(wide.slice(1, 3, 67), w, false, true); }, true, "strided nt");
  const Tensor xa = test::to_gpu(test::as_f32(rng.uniform(3 * 20 * 28)), {3, 20, 28});
  const Tensor xb = test::to_gpu(test::as_f32(rng.uniform(3 * 36 * 28)), {3, 36, 28});
  both([&] { return ops::matmul(xa, xb, false, true); }, true, "batch nt");
  // Several 32 x 32 tiles of the f16 transpose each way, partial at both edges, and an odd
  // number of rows.
  const Tensor tall = test::to_gpu(test::as_f32(rng.uniform(130 * 72)), {130, 72});
  const Tensor w72 = test::to_gpu(test::as_f32(rng.uniform(40 * 72)), {40, 72});
  both([&] { return ops::matmul(tall, w72, false, true); }, true, "two tiles nt");
  const Tensor odd = test::to_gpu(test::as_f32(rng.uniform(37 * 60)), {37, 60});
  const Tensor w60 = test::to_gpu(test::as_f32(rng.uniform(52 * 60)), {52, 60});
  both([&] { return ops::matmul(odd, w60, false, true); }, true, "odd rows nt");
}

// The tensor-core kernel with its cooperative-matrix operations emulated, on every device: the
// tile variants that fit the device's shared memory, every transpose, partial tiles, batches with
// a shared operand, alpha/beta/bias into row- and column-major outputs, split-K, several
// dispatches per grid, and exact rounding of a sample of the edge values. Each with the operands
// converted to f16 before the product (16-byte and scalar f16 reads) and converted while staged.
TEST(MatmulF16, CoopmatKernelLogicEmulated) {
  Rng rng(109);
  const auto all_values = edge_values();
  std::vector<double> values;
  for (size_t i = 0; i < all_values.size(); i += 23) values.push_back(all_values[i]);
  for (size_t i = all_values.size() - 32; i < all_values.size(); ++i)
    values.push_back(all_values[i]);
  int variants_run = 0;
  for (const auto& tile : ops::detail::coopmat_tiles()) {
    F16Scope scope(tile.name());
    ops::detail::set_coopmat_emulation(true);
    const auto support = ops::detail::coopmat_support();
    ASSERT_EQ(support.unsupported, "");
    if (const auto why = ops::detail::coopmat_tile_unfit(tile, support); !why.empty()) {
      std::printf("emulated %s not run: %s\n", tile.name().c_str(), why.c_str());
      continue;
    }
    ++variants_run;
    ASSERT_EQ(ops::detail::gemm_plan(1, 36, 52, 60), "coopmat " + tile.name() + " emulated");
    for (const bool f16_operands : {true, false}) {
      ops::detail::set_coopmat_f16_operands(f16_operands);
      const std::string path =
          "emulated coopmat " + tile.name() + (f16_operands ? " f16 operands" : " f32 operands");
      // Sizes are multiples of 4 but not of 8 (vec4 reads, with scalar reads where a chunk of 8
      // crosses the end), so all of these share a few pipelines: lavapipe compiles slowly.
      for (int t = 0; t < 4; ++t) {
        const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
        check_product(rng, {}, {1, 36, 52, 60, ta, tb, false}, path, true);
        check_product(rng, {2}, {1, 20, 12, 28, ta, tb, true}, path);
      }
      // Every size a multiple of 8: 16-byte reads of f16 operands.
      check_product(rng, {}, {1, 40, 48, 64, true, false, false}, path);
      check_product(rng, {3}, {1, 68, 44, 36, false, false, false}, path);
      // alpha, beta, bias into a column window, and into a column-major view.
      const ref::MatmulShape s{1, 44, 52, 20};
      const auto a = test::as_f32(rng.uniform(s.a_size()));
      const auto b = test::as_f32(rng.uniform(s.b_size()));
      const auto bias = test::as_f32(rng.uniform(s.n));
      const auto before = test::as_f32(rng.uniform(s.m * s.n));
      for (bool column_major : {false, true}) {
        Tensor out = column_major ? test::to_gpu(before, {s.n, s.m}).transpose(0, 1)
                                  : test::to_gpu(before, {s.m, s.n});
        matmul_into(test::to_gpu(a, {s.m, s.k}), test::to_gpu(b, {s.k, s.n}), false, false, out,
                    0.5f, 0.25f, test::to_gpu(bias, {s.n}));
        std::vector<double> c_before(before.size());  // before as the [m, n] it stood for
        for (int64_t m = 0; m < s.m; ++m)
          for (int64_t n = 0; n < s.n; ++n)
            c_before[m * s.n + n] = column_major ? before[n * s.m + m] : before[m * s.n + n];
        Expected e = expect_f16(a, b, s, 0.5);
        add_epilogue(e, 0.25, c_before, bias, s.n);
        expect_within(out.contiguous().to_double(), e,
                      path + (column_major ? " column-major C" : " row-major C"));
      }
      ops::detail::set_split_k(2);
      check_product(rng, {}, {1, 36, 60, 64, false, true, false}, path + " split-K 2", true);
      ops::detail::set_split_k(0);
      ops::detail::set_grid_limit(2);
      check_product(rng, {}, {1, 3 * tile.bm + 4, 2 * tile.bn + 4, 8, true, false, false},
                    path + " grid limit 2");
      ops::detail::set_grid_limit(65535);
      if (variants_run == 1) check_edge_values(values, path);  // the conversion: once per mode
    }
  }
  EXPECT_GT(variants_run, 0);
}

// linear() converts its output gradient to f16 once for both backward products, and gemm() reads
// f16 copies of whole f32 operands on tensor cores; neither changes a bit of the results (the
// kernel rounds to f16 as it stages otherwise). Checked with the emulated tensor-core kernel
// against f16 operand copies turned off, on shapes that send some products to the skinny kernels
// (which get the f16 gradient widened back) and with split-K forced; and with every copy relaid
// into the kernel's fast layout, where dx takes its own transposed copy of the gradient.
TEST(MatmulF16, F16OperandCopiesChangeNoBit) {
  struct Shape3 {
    int64_t rows, in, out, split_k;
  };
  Rng rng(117);
  for (const Shape3& d : {Shape3{40, 48, 56, 0}, Shape3{6, 32, 40, 0}, Shape3{64, 16, 8, 0},
                          Shape3{72, 64, 24, 2}}) {
    const Tensor x = test::to_gpu(rng.uniform(d.rows * d.in), {d.rows, d.in});
    const Tensor w = test::to_gpu(rng.uniform(d.out * d.in), {d.out, d.in});
    const Tensor bias = test::to_gpu(rng.uniform(d.out), {d.out});
    const Tensor seed = test::to_gpu(rng.uniform(d.rows * d.out), {d.rows, d.out});
    // 0: no copies; 1: f16 copies; 2: f16 copies relaid wherever an operand is in a slow layout
    // (dx then reads its own transposed copy of G instead of the shared one).
    std::vector<std::vector<double>> results[3];
    struct Guard {
      ~Guard() { ops::detail::set_tiled_relayout(ops::detail::RelayoutChoice::Auto); }
    } guard;
    for (int mode = 0; mode < 3; ++mode) {
      const bool copies = mode > 0;
      F16Scope scope;
      ops::detail::set_coopmat_emulation(true);
      ops::detail::set_coopmat_f16_operands(copies);
      ops::detail::set_tiled_relayout(mode == 2 ? ops::detail::RelayoutChoice::Always
                                                : ops::detail::RelayoutChoice::Off);
      ops::detail::set_split_k(d.split_k);
      ASSERT_EQ(ops::detail::f16_operands_active(), copies);
      for (Tensor t : {x, w, bias}) {
        t.zero_grad();
        t.set_requires_grad(true);
      }
      autograd::Tape tape;
      Tensor y;
      {
        autograd::TapeScope tape_scope(tape);
        y = ops::linear(x, w, bias);
      }
      tape.backward(y, seed);
      results[mode] = {y.to_double(), x.grad().to_double(), w.grad().to_double(),
                       bias.grad().to_double()};
      for (Tensor t : {x, w, bias}) t.set_requires_grad(false);
    }
    const std::string what = fmt::format("linear rows {} in {} out {} split-K {}", d.rows, d.in,
                                         d.out, d.split_k);
    const char* names[] = {"y", "dx", "dw", "db"};
    for (int mode = 1; mode < 3; ++mode)
      for (size_t i = 0; i < 4; ++i)
        EXPECT_EQ(results[mode][i], results[0][i]) << what << ": " << names[i] << " mode " << mode;
  }
}

TEST(MatmulF16, Deterministic) {
  Rng rng(108);
  for (const auto& path : path_choices()) {
    F16Scope scope(path);
    for (const Mnk& d : {Mnk{128, 128, 128}, Mnk{65, 129, 300}, Mnk{3, 200, 1000}}) {
      Tensor a = test::to_gpu(rng.uniform(d.m * d.k), {d.m, d.k});
      Tensor b = test::to_gpu(rng.uniform(d.k * d.n), {d.k, d.n});
      test::expect_bitwise_equal(matmul(a, b), matmul(a, b), path + " " + std::to_string(d.m));
    }
  }
}

TEST(MatmulF16, UnknownTileNamed) {
  test::expect_error([] { ops::detail::set_coopmat_choice("99x99"); },
                     {"99x99", "auto", "off", ops::detail::coopmat_tiles()[0].name()});
}

}  // namespace
}  // namespace vkf
