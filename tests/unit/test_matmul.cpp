// matmul / matmul_into / linear against the double reference (ref::matmul, ref::linear) on odd
// shapes that exercise every kernel path (tiled, skinny, skinny on the transposed problem) and
// every transpose combination; strided views; alpha/beta/bias; gradients against the reference
// backward, and the reference backward against finite differences; determinism; bad input; grids
// beyond one dispatch; and an operand larger than lavapipe's 128 MiB storage-buffer range.
#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "ops/matmul.h"
#include "ops/matmul_kernels.h"
#include "ops/matmul_ref.h"
#include "test_util.h"
#include "vk/context.h"
#include "vk/error.h"

namespace vkf {
namespace {

using ops::linear;
using ops::matmul;
using ops::matmul_into;
using test::Rng;

// fp32 sums over k: the error grows with k; a wrong element is off by O(1).
using test::product_atol;
constexpr double kRtol = test::kProductRtol;

std::string describe(const ref::MatmulShape& s) {
  return "batch " + std::to_string(s.batch) + " M=" + std::to_string(s.m) +
         " N=" + std::to_string(s.n) + " K=" + std::to_string(s.k) + (s.trans_a ? " A^T" : "") +
         (s.trans_b ? " B^T" : "") + (s.shared_b ? " shared B" : "");
}

// Runs matmul on fresh random operands of shape s (batch dims `batch`) and checks the reference.
void check_forward(Rng& rng, const Shape& batch, ref::MatmulShape s) {
  s.batch = shape_numel(batch);
  const auto a = test::as_f32(rng.uniform(s.a_size()));
  const auto b = test::as_f32(rng.uniform(s.b_size()));
  Tensor c = matmul(test::to_gpu(a, s.a_shape(batch)), test::to_gpu(b, s.b_shape(batch)),
                    s.trans_a, s.trans_b);
  Shape want_shape = batch;
  want_shape.push_back(s.m);
  want_shape.push_back(s.n);
  EXPECT_EQ(c.shape(), want_shape) << describe(s);
  test::expect_close(c, ref::matmul(a, b, s), product_atol(s.k), kRtol, describe(s));
}

struct Mnk {
  int64_t m, n, k;
};
// 1x1x1; decode (M = 1); skinny edges M = 8 / 9; N <= 8 (the transposed skinny problem);
// K past the skinny kernel's 256-deep chunk; primes and non-multiples of every tile; one full
// large tile; a mid-size product of several tiles in every direction.
const Mnk kShapes[] = {{1, 1, 1},   {1, 61, 37},     {37, 13, 61},   {65, 129, 17},
                       {8, 33, 20}, {9, 33, 20},     {61, 3, 40},    {7, 5, 300},
                       {2, 70, 1},  {128, 128, 128}, {200, 257, 190}};

TEST(Matmul, ForwardAllTransposes) {
  Rng rng(1);
  for (const Mnk& d : kShapes)
    for (int t = 0; t < 4; ++t)
      check_forward(rng, {}, {1, d.m, d.n, d.k, (t & 1) != 0, (t & 2) != 0, false});
}

TEST(Matmul, BatchedAndSharedWeight) {
  Rng rng(2);
  for (int t = 0; t < 4; ++t) {
    const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
    for (const Mnk& d : {Mnk{13, 17, 19}, Mnk{3, 17, 19}, Mnk{13, 4, 19}}) {
      check_forward(rng, {2, 3}, {1, d.m, d.n, d.k, ta, tb, false});
      check_forward(rng, {2, 5}, {1, d.m, d.n, d.k, ta, tb, true});
    }
    // Decode against a shared weight: four single rows become one skinny product.
    check_forward(rng, {4}, {1, 1, 29, 23, ta, tb, true});
  }
}

TEST(Matmul, StridedViews) {
  Rng rng(3);
  auto& stream = vk::Context::get().stream();
  // A [37, 61] window of a [50, 70] matrix and a [61, 13] window of a [64, 20] one.
  const auto big_a = test::as_f32(rng.uniform(50 * 70));
  const auto big_b = test::as_f32(rng.uniform(64 * 20));
  std::vector<double> a(37 * 61), b(61 * 13);
  for (int i = 0; i < 37; ++i)
    for (int j = 0; j < 61; ++j) a[i * 61 + j] = big_a[(i + 3) * 70 + j + 5];
  for (int i = 0; i < 61; ++i)
    for (int j = 0; j < 13; ++j) b[i * 13 + j] = big_b[(i + 2) * 20 + j + 4];
  Tensor av = test::to_gpu(big_a, {50, 70}).slice(0, 3, 40).slice(1, 5, 66);
  Tensor bv = test::to_gpu(big_b, {64, 20}).slice(0, 2, 63).slice(1, 4, 17);
  const ref::MatmulShape s{1, 37, 13, 61};
  const auto want = ref::matmul(a, b, s);
  uint64_t before = stream.dispatch_count();
  Tensor c = matmul(av, bv);
  EXPECT_EQ(stream.dispatch_count() - before, 1u) << "slices are read in place";
  test::expect_close(c, want, product_atol(61), kRtol, "slice views");

  // A transposed view is read as the transposed operand, without a copy.
  Tensor bt = test::to_gpu(b, {61, 13}).transpose(0, 1).contiguous();  // [13, 61]
  before = stream.dispatch_count();
  Tensor c2 = matmul(av, bt.transpose(0, 1));
  EXPECT_EQ(stream.dispatch_count() - before, 1u) << "transposed views are read in place";
  test::expect_close(c2, want, product_atol(61), kRtol, "transposed view");
  test::expect_close(matmul(av, bt.transpose(0, 1).transpose(0, 1), false, true), want,
                     product_atol(61), kRtol, "double transpose with trans_b");

  // Skinny products against a window of a [40, 72] weight read as B^T: a window starting 4
  // floats in keeps every row 16-byte aligned (vec4 reads), one starting 1 float in does not.
  const auto big_w = test::as_f32(rng.uniform(40 * 72));
  const auto x = test::as_f32(rng.uniform(3 * 64));
  for (int64_t start : {4, 1}) {
    std::vector<double> w(40 * 64);
    for (int i = 0; i < 40; ++i)
      for (int j = 0; j < 64; ++j) w[i * 64 + j] = big_w[i * 72 + start + j];
    Tensor wv = test::to_gpu(big_w, {40, 72}).slice(1, start, start + 64);
    test::expect_close(matmul(test::to_gpu(x, {3, 64}), wv, false, true),
                       ref::matmul(x, w, {1, 3, 40, 64, false, true, false}), product_atol(64),
                       kRtol, "skinny x W^T, W a window at column " + std::to_string(start));
  }

  // Batch dimensions that do not collapse to one stride, and matrices with no contiguous
  // dimension, are copied first.
  const ref::MatmulShape sb{12, 5, 7, 6};
  const auto xa = test::as_f32(rng.uniform(4 * 6 * 5 * 6));
  const auto xb = test::as_f32(rng.uniform(sb.b_size()));
  std::vector<double> a_sel;  // xa[:, 1:4] as [4, 3, 5, 6]
  for (int i = 0; i < 4; ++i)
    for (int j = 1; j < 4; ++j)
      for (int r = 0; r < 30; ++r) a_sel.push_back(xa[(i * 6 + j) * 30 + r]);
  Tensor cs = matmul(test::to_gpu(xa, {4, 6, 5, 6}).slice(1, 1, 4), test::to_gpu(xb, {4, 3, 6, 7}));
  test::expect_close(cs, ref::matmul(a_sel, xb, sb), product_atol(6), kRtol, "batch slice");

  // [B=3, M=5, K=4] stored as [K, M, B]: no dimension of the matrices is contiguous.
  const auto kmb = test::as_f32(rng.uniform(4 * 5 * 3));
  std::vector<double> bmk(kmb.size());
  for (int bb = 0; bb < 3; ++bb)
    for (int m = 0; m < 5; ++m)
      for (int k = 0; k < 4; ++k) bmk[(bb * 5 + m) * 4 + k] = kmb[(k * 5 + m) * 3 + bb];
  const auto w = test::as_f32(rng.uniform(4 * 9));
  const ref::MatmulShape sw{3, 5, 9, 4, false, false, true};
  test::expect_close(matmul(test::to_gpu(kmb, {4, 5, 3}).transpose(0, 2), test::to_gpu(w, {4, 9})),
                     ref::matmul(bmk, w, sw), product_atol(4), kRtol, "no contiguous dimension");
}

// out = alpha * op(a) op(b) + beta * out + bias, written into a column window of a wider matrix
// whose other columns must stay as they were.
TEST(Matmul, IntoWithAlphaBetaAndBias) {
  Rng rng(4);
  for (const Mnk& d : {Mnk{37, 61, 13}, Mnk{3, 40, 29}, Mnk{45, 5, 16}}) {
    for (int t = 0; t < 4; ++t) {
      ref::MatmulShape s{1, d.m, d.n, d.k, (t & 1) != 0, (t & 2) != 0, false};
      const auto a = test::as_f32(rng.uniform(s.a_size()));
      const auto b = test::as_f32(rng.uniform(s.b_size()));
      const auto bias = test::as_f32(rng.uniform(s.n));
      const int64_t width = s.n + 7;
      const auto before = test::as_f32(rng.uniform(s.m * width));
      const auto prod = ref::matmul(a, b, s);
      const Tensor ta = test::to_gpu(a, s.a_shape({})), tb = test::to_gpu(b, s.b_shape({}));
      for (const auto& [alpha, beta, with_bias] :
           {std::tuple{1.0f, 1.0f, false}, std::tuple{0.5f, 0.25f, true},
            std::tuple{2.0f, 0.0f, true}}) {
        Tensor wide = test::to_gpu(before, {s.m, width});
        if (beta == 0.0f) wide.slice(1, 3, 3 + s.n).fill_(NAN);  // never read with beta == 0
        matmul_into(ta, tb, s.trans_a, s.trans_b, wide.slice(1, 3, 3 + s.n), alpha, beta,
                    with_bias ? test::to_gpu(bias, {s.n}) : Tensor());
        std::vector<double> want = before;
        for (int64_t m = 0; m < s.m; ++m)
          for (int64_t n = 0; n < s.n; ++n) {
            double& w = want[m * width + 3 + n];
            w = alpha * prod[m * s.n + n] + beta * w + (with_bias ? bias[n] : 0.0);
          }
        test::expect_close(wide, want, product_atol(s.k) * 2, kRtol,
                           describe(s) + " alpha " + std::to_string(alpha) + " beta " +
                               std::to_string(beta) + (with_bias ? " bias" : ""));
      }
    }
  }
  // Batched with a bias, into a fresh (NaN-poisoned) output.
  ref::MatmulShape s{6, 11, 10, 9};
  const auto a = test::as_f32(rng.uniform(s.a_size()));
  const auto b = test::as_f32(rng.uniform(s.b_size()));
  const auto bias = test::as_f32(rng.uniform(s.n));
  Tensor out = Tensor::empty({2, 3, s.m, s.n});
  matmul_into(test::to_gpu(a, {2, 3, s.m, s.k}), test::to_gpu(b, {2, 3, s.k, s.n}), false, false,
              out, 1.0f, 0.0f, test::to_gpu(bias, {s.n}));
  auto want = ref::matmul(a, b, s);
  for (size_t i = 0; i < want.size(); ++i) want[i] += bias[i % s.n];
  test::expect_close(out, want, product_atol(s.k), kRtol, "batched bias");

  // Into a transposed view (column-major output), accumulating.
  const Tensor ta = test::to_gpu(a, {2, 3, s.m, s.k}), tb = test::to_gpu(b, {2, 3, s.k, s.n});
  Tensor out_t = Tensor::full({2, 3, s.n, s.m}, 1.0f);
  matmul_into(ta, tb, false, false, out_t.transpose(2, 3), 1.0f, 1.0f);
  std::vector<double> want_t(want.size());
  const auto prod = ref::matmul(a, b, s);
  for (int64_t z = 0; z < s.batch; ++z)
    for (int64_t m = 0; m < s.m; ++m)
      for (int64_t n = 0; n < s.n; ++n)
        want_t[(z * s.n + n) * s.m + m] = prod[(z * s.m + m) * s.n + n] + 1.0;
  test::expect_close(out_t, want_t, product_atol(s.k), kRtol, "into a transposed view");

  // Into batch entries 1..3 of a [2, 5, M, N] tensor: the batch dimensions do not collapse to one
  // stride, so the product goes through a contiguous temporary; the other entries stay 2.
  Tensor wide = Tensor::full({2, 5, s.m, s.n}, 2.0f);
  matmul_into(ta, tb, false, false, wide.slice(1, 1, 4), 0.5f, 1.0f);
  std::vector<double> want_w(2 * 5 * s.m * s.n, 2.0);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t e = 0; e < s.m * s.n; ++e)
        want_w[((i * 5) + j + 1) * s.m * s.n + e] = 0.5 * prod[(i * 3 + j) * s.m * s.n + e] + 2.0;
  test::expect_close(wide, want_w, product_atol(s.k), kRtol, "into a batch slice");
}

TEST(Linear, ForwardWithAndWithoutBias) {
  Rng rng(5);
  struct Case {
    Shape x;
    int64_t out;
  };
  for (const Case& c : {Case{{3, 5, 37}, 61}, Case{{37}, 13}, Case{{1, 7}, 13}, Case{{2, 64}, 3},
                        Case{{70, 1}, 9}}) {
    const int64_t in = c.x.back(), rows = shape_numel(c.x) / in;
    const auto x = test::as_f32(rng.uniform(rows * in));
    const auto w = test::as_f32(rng.uniform(c.out * in));
    const auto bias = test::as_f32(rng.uniform(c.out));
    Shape y_shape = c.x;
    y_shape.back() = c.out;
    const std::string what = "linear " + shape_str(c.x) + " -> " + std::to_string(c.out);
    Tensor y = linear(test::to_gpu(x, c.x), test::to_gpu(w, {c.out, in}));
    EXPECT_EQ(y.shape(), y_shape);
    test::expect_close(y, ref::linear(x, w, {}, rows, in, c.out), product_atol(in), kRtol, what);
    Tensor yb =
        linear(test::to_gpu(x, c.x), test::to_gpu(w, {c.out, in}), test::to_gpu(bias, {c.out}));
    test::expect_close(yb, ref::linear(x, w, bias, rows, in, c.out), product_atol(in), kRtol,
                       what + " with bias");
  }
}

// Input gradients after one and after two backward passes over fresh tapes: leaf gradients
// accumulate across passes, so the second must be twice the first (the beta = 1 GEMM paths).
using GradSets = std::vector<std::vector<double>>;
std::pair<GradSets, GradSets> grads_twice(
    const std::function<Tensor(std::vector<Tensor>&)>& forward, std::vector<Tensor> inputs,
    const Tensor& seed) {
  for (auto& t : inputs) {
    t.zero_grad();
    t.set_requires_grad(true);
  }
  GradSets passes[2];
  for (auto& grads : passes) {
    autograd::Tape tape;
    Tensor out;
    {
      autograd::TapeScope scope(tape);
      out = forward(inputs);
    }
    tape.backward(out, seed);
    for (auto& t : inputs)
      grads.push_back(t.grad().defined() ? t.grad().to_double() : std::vector<double>());
  }
  for (auto& t : inputs) t.set_requires_grad(false);
  return {passes[0], passes[1]};
}

std::vector<double> twice(const std::vector<double>& v) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = 2 * v[i];
  return r;
}

// GPU gradients of sum(dc * matmul(a, b)) against ref::matmul_backward.
void check_matmul_grads(Rng& rng, const Shape& batch, ref::MatmulShape s) {
  s.batch = shape_numel(batch);
  const auto a = test::as_f32(rng.uniform(s.a_size()));
  const auto b = test::as_f32(rng.uniform(s.b_size()));
  const auto dc = test::as_f32(rng.uniform(s.c_size()));
  Shape c_shape = batch;
  c_shape.push_back(s.m);
  c_shape.push_back(s.n);
  const bool ta = s.trans_a, tb = s.trans_b;
  const auto [got, got2] =
      grads_twice([ta, tb](std::vector<Tensor>& in) { return matmul(in[0], in[1], ta, tb); },
                  {test::to_gpu(a, s.a_shape(batch)), test::to_gpu(b, s.b_shape(batch))},
                  test::to_gpu(dc, c_shape));
  std::vector<double> da, db;
  ref::matmul_backward(a, b, dc, s, da, db);
  const double tol = product_atol(std::max(s.m, s.n) * s.batch);
  test::expect_close(got[0], da, tol, kRtol, "dA " + describe(s));
  test::expect_close(got[1], db, tol, kRtol, "dB " + describe(s));
  test::expect_close(got2[0], twice(da), 2 * tol, kRtol, "accumulated dA " + describe(s));
  test::expect_close(got2[1], twice(db), 2 * tol, kRtol, "accumulated dB " + describe(s));
}

TEST(Matmul, GradientsMatchReference) {
  Rng rng(6);
  for (int t = 0; t < 4; ++t) {
    const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
    check_matmul_grads(rng, {}, {1, 13, 11, 10, ta, tb, false});
    check_matmul_grads(rng, {}, {1, 3, 37, 5, ta, tb, false});
    check_matmul_grads(rng, {2, 3}, {1, 7, 12, 9, ta, tb, false});
    check_matmul_grads(rng, {2, 5}, {1, 7, 12, 9, ta, tb, true});
    check_matmul_grads(rng, {3}, {1, 1, 20, 17, ta, tb, true});
  }
}

TEST(Matmul, ReferenceGradientMatchesFiniteDifferences) {
  Rng rng(7);
  for (int t = 0; t < 8; ++t) {
    const ref::MatmulShape s{2, 3, 4, 5, (t & 1) != 0, (t & 2) != 0, (t & 4) != 0};
    const auto a = rng.uniform(s.a_size()), b = rng.uniform(s.b_size());
    const auto dc = rng.uniform(s.c_size());
    std::vector<double> da, db;
    ref::matmul_backward(a, b, dc, s, da, db);
    const auto na = test::numeric_grad(
        [&](const std::vector<double>& x) { return ref::matmul(x, b, s); }, a, dc);
    const auto nb = test::numeric_grad(
        [&](const std::vector<double>& x) { return ref::matmul(a, x, s); }, b, dc);
    test::expect_close(da, na, 1e-7, 1e-6, "ref dA " + describe(s));
    test::expect_close(db, nb, 1e-7, 1e-6, "ref dB " + describe(s));
  }
}

TEST(Matmul, GradientOfOperandUsedTwice) {
  // y = x x^T uses x twice, so its gradient G x + G^T x arrives in two parts that accumulate; a
  // second backward adds to the leaf's gradient again.
  Rng rng(8);
  const int64_t m = 11, k = 9;
  const auto x = test::as_f32(rng.uniform(m * k));
  const auto g = test::as_f32(rng.uniform(m * m));
  const ref::MatmulShape s{1, m, m, k, false, true, false};
  std::vector<double> d1, d2;
  ref::matmul_backward(x, x, g, s, d1, d2);
  Tensor xt = test::to_gpu(x, {m, k});
  xt.set_requires_grad(true);
  for (int call = 1; call <= 2; ++call) {
    autograd::Tape tape;
    Tensor y;
    {
      autograd::TapeScope scope(tape);
      y = matmul(xt, xt, false, true);
    }
    tape.backward(y, test::to_gpu(g, {m, m}));
    std::vector<double> want(d1.size());
    for (size_t i = 0; i < want.size(); ++i) want[i] = call * (d1[i] + d2[i]);
    test::expect_close(xt.grad(), want, product_atol(2 * m), kRtol, "call " + std::to_string(call));
  }
}

void check_linear_grads(Rng& rng, const Shape& x_shape, int64_t out, bool with_bias) {
  const int64_t in = x_shape.back(), rows = shape_numel(x_shape) / in;
  const auto x = test::as_f32(rng.uniform(rows * in));
  const auto w = test::as_f32(rng.uniform(out * in));
  const auto bias = test::as_f32(rng.uniform(out));
  const auto dy = test::as_f32(rng.uniform(rows * out));
  Shape y_shape = x_shape;
  y_shape.back() = out;
  std::vector<Tensor> inputs = {test::to_gpu(x, x_shape), test::to_gpu(w, {out, in})};
  if (with_bias) inputs.push_back(test::to_gpu(bias, {out}));
  const auto [got, got2] = grads_twice(
      [](std::vector<Tensor>& t) { return linear(t[0], t[1], t.size() > 2 ? t[2] : Tensor()); },
      inputs, test::to_gpu(dy, y_shape));
  std::vector<double> dx, dw, db;
  ref::linear_backward(x, w, dy, rows, in, out, with_bias, dx, dw, db);
  const std::string what = "linear " + shape_str(x_shape) + " -> " + std::to_string(out);
  test::expect_close(got[0], dx, product_atol(out), kRtol, "dx " + what);
  test::expect_close(got[1], dw, product_atol(rows), kRtol, "dW " + what);
  if (with_bias) test::expect_close(got[2], db, product_atol(rows), kRtol, "db " + what);
  test::expect_close(got2[0], twice(dx), 2 * product_atol(out), kRtol, "accumulated dx " + what);
  test::expect_close(got2[1], twice(dw), 2 * product_atol(rows), kRtol, "accumulated dW " + what);
  if (with_bias)
    test::expect_close(got2[2], twice(db), 2 * product_atol(rows), kRtol, "accumulated db " + what);
}

TEST(Linear, GradientsMatchReference) {
  Rng rng(9);
  check_linear_grads(rng, {2, 3, 7}, 5, true);
  check_linear_grads(rng, {2, 3, 7}, 5, false);
  check_linear_grads(rng, {13}, 37, true);
  check_linear_grads(rng, {37, 61}, 13, true);
  // More rows than one column-sum pass takes: partial sums per row chunk, then their sum.
  check_linear_grads(rng, {5000, 3}, 40, true);
}

TEST(Linear, ReferenceGradientMatchesFiniteDifferences) {
  Rng rng(10);
  const int64_t rows = 4, in = 3, out = 5;
  const auto x = rng.uniform(rows * in), w = rng.uniform(out * in), b = rng.uniform(out);
  const auto dy = rng.uniform(rows * out);
  std::vector<double> dx, dw, db;
  ref::linear_backward(x, w, dy, rows, in, out, true, dx, dw, db);
  auto f_x = [&](const std::vector<double>& v) { return ref::linear(v, w, b, rows, in, out); };
  auto f_w = [&](const std::vector<double>& v) { return ref::linear(x, v, b, rows, in, out); };
  auto f_b = [&](const std::vector<double>& v) { return ref::linear(x, w, v, rows, in, out); };
  test::expect_close(dx, test::numeric_grad(f_x, x, dy), 1e-7, 1e-6, "ref dx");
  test::expect_close(dw, test::numeric_grad(f_w, w, dy), 1e-7, 1e-6, "ref dW");
  test::expect_close(db, test::numeric_grad(f_b, b, dy), 1e-7, 1e-6, "ref db");
}

TEST(Matmul, Deterministic) {
  Rng rng(11);
  for (const Mnk& d :
       {Mnk{128, 128, 128}, Mnk{65, 129, 300}, Mnk{3, 200, 1000}, Mnk{200, 2, 1000}}) {
    Tensor a = test::to_gpu(rng.uniform(d.m * d.k), {d.m, d.k});
    Tensor b = test::to_gpu(rng.uniform(d.k * d.n), {d.k, d.n});
    test::expect_bitwise_equal(matmul(a, b), matmul(a, b), "matmul " + std::to_string(d.m));
  }
  Tensor x = test::to_gpu(rng.uniform(5000 * 24), {5000, 24});
  Tensor w = test::to_gpu(rng.uniform(40 * 24), {40, 24});
  Tensor bias = test::to_gpu(rng.uniform(40), {40});
  Tensor dy = test::to_gpu(rng.uniform(5000 * 40), {5000, 40});
  auto run = [&] {
    autograd::Tape tape;
    std::vector<Tensor> in = {x, w, bias};
    for (auto& t : in) {
      t.zero_grad();
      t.set_requires_grad(true);
    }
    Tensor y;
    {
      autograd::TapeScope scope(tape);
      y = linear(in[0], in[1], in[2]);
    }
    tape.backward(y, dy);
    std::vector<Tensor> grads = {x.grad(), w.grad(), bias.grad()};
    for (auto& t : in) t.set_requires_grad(false);
    return grads;
  };
  const auto g1 = run(), g2 = run();
  for (size_t i = 0; i < g1.size(); ++i) test::expect_bitwise_equal(g1[i], g2[i], "linear grad");
}

TEST(Matmul, BadInputThrows) {
  Tensor a = Tensor::zeros({3, 4}), b = Tensor::zeros({4, 5});
  EXPECT_THROW(matmul(a, Tensor::zeros({5, 5})), Error);              // K mismatch
  EXPECT_THROW(matmul(a, b, true), Error);                            // K mismatch via trans
  EXPECT_THROW(matmul(a, Tensor::zeros({4, 5}, DType::I32)), Error);  // dtype
  EXPECT_THROW(matmul(Tensor::zeros({3, 4}, DType::F16), b), Error);  // dtype
  EXPECT_THROW(matmul(Tensor::zeros({4}), b), Error);                 // rank < 2
  EXPECT_THROW(matmul(a, Tensor::zeros({4})), Error);                 // rank < 2
  EXPECT_THROW(matmul(Tensor::zeros({2, 3, 4}), Tensor::zeros({3, 4, 5})), Error);  // batch
  EXPECT_THROW(matmul(a, Tensor::zeros({2, 4, 5})), Error);  // batched b, plain a
  EXPECT_THROW(matmul(Tensor(), b), Error);                  // undefined
  EXPECT_THROW(matmul(a, Tensor()), Error);
  EXPECT_THROW(matmul(Tensor::zeros({0, 4}), b), Error);                        // empty
  EXPECT_THROW(matmul_into(a, b, false, false, Tensor::zeros({3, 6})), Error);  // out shape
  EXPECT_THROW(matmul_into(a, b, false, false, Tensor::zeros({3, 5}), 1, 0, Tensor::zeros({4})),
               Error);  // bias shape
  EXPECT_THROW(matmul_into(a, b, false, false, Tensor::zeros({3, 5}, DType::I32)), Error);
  Tensor shared = Tensor::zeros({4, 9});  // out overlapping an input
  EXPECT_THROW(matmul_into(shared.slice(0, 0, 3).slice(1, 0, 4), shared.slice(1, 0, 5), false,
                           false, shared.slice(0, 1, 4).slice(1, 4, 9)),
               Error);
  EXPECT_THROW(linear(Tensor::zeros({2, 5}), Tensor::zeros({3, 4})), Error);  // in mismatch
  EXPECT_THROW(linear(Tensor::zeros({2, 4}), Tensor::zeros({3, 4}), Tensor::zeros({4})), Error);
  EXPECT_THROW(linear(Tensor::zeros({2, 4}), Tensor::zeros({3, 4, 1})), Error);
  EXPECT_THROW(linear(Tensor::zeros({2, 4}, DType::I32), Tensor::zeros({3, 4})), Error);
  EXPECT_THROW(linear(Tensor(), Tensor::zeros({3, 4})), Error);
  test::expect_error([&] { matmul(a, Tensor::zeros({5, 5})); }, {"matmul", "[3, 4]", "[5, 5]"});
}

// Restores the kernel choices a test forces, also when it fails.
struct ForcedKernels {
  ForcedKernels(ops::detail::TileChoice tile, int64_t grid_limit) {
    ops::detail::set_tile_choice(tile);
    ops::detail::set_grid_limit(grid_limit);
  }
  ~ForcedKernels() {
    ops::detail::set_tile_choice(ops::detail::TileChoice::Auto);
    ops::detail::set_grid_limit(65535);
  }
  ForcedKernels(const ForcedKernels&) = delete;
  ForcedKernels& operator=(const ForcedKernels&) = delete;
};

TEST(Matmul, EveryTileSize) {
  Rng rng(12);
  using ops::detail::TileChoice;
  for (TileChoice tile : {TileChoice::Medium, TileChoice::Large}) {
    ForcedKernels forced(tile, 65535);
    for (int t = 0; t < 4; ++t) {
      check_forward(rng, {}, {1, 37, 61, 13, (t & 1) != 0, (t & 2) != 0, false});
      check_forward(rng, {2}, {1, 130, 129, 33, (t & 1) != 0, (t & 2) != 0, false});
    }
  }
}

// Split-K (a product's K cut into chunks computed as batch entries, then summed in order): forced
// here on every transpose combination, with alpha, beta and a bias, into a strided output.
TEST(Matmul, SplitK) {
  Rng rng(14);
  struct Restore {
    ~Restore() { ops::detail::set_split_k(0); }
  } restore;
  // Up to 12 chunks: the reduction sums many partials in a fixed order.
  for (int64_t chunks : {2, 4, 8, 12}) {
    ops::detail::set_split_k(chunks);
    for (int t = 0; t < 4; ++t) {
      check_forward(rng, {}, {1, 37, 61, 64, (t & 1) != 0, (t & 2) != 0, false});
      ref::MatmulShape s{1, 29, 35, 96, (t & 1) != 0, (t & 2) != 0, false};
      const auto a = test::as_f32(rng.uniform(s.a_size()));
      const auto b = test::as_f32(rng.uniform(s.b_size()));
      const auto bias = test::as_f32(rng.uniform(s.n));
      const auto before = test::as_f32(rng.uniform(s.m * (s.n + 5)));
      Tensor wide = test::to_gpu(before, {s.m, s.n + 5});
      matmul_into(test::to_gpu(a, s.a_shape({})), test::to_gpu(b, s.b_shape({})), s.trans_a, s.trans_b,
                  wide.slice(1, 2, 2 + s.n), 0.5f, 0.75f, test::to_gpu(bias, {s.n}));
      const auto prod = ref::matmul(a, b, s);
      std::vector<double> want = before;
      for (int64_t m = 0; m < s.m; ++m)
        for (int64_t n = 0; n < s.n; ++n) {
          double& w = want[m * (s.n + 5) + 2 + n];
          w = 0.5 * prod[m * s.n + n] + 0.75 * w + bias[n];
        }
      test::expect_close(wide, want, product_atol(s.k) * 2, kRtol,
                         describe(s) + " split-K " + std::to_string(chunks));
    }
  }
}

// Grids past the per-dimension workgroup limit are split into several dispatches. The limit is
// lowered to 2 so that small problems split along every dimension of every kernel.
TEST(Matmul, GridsBeyondOneDispatch) {
  Rng rng(13);
  using ops::detail::TileChoice;
  for (TileChoice tile : {TileChoice::Medium, TileChoice::Large}) {
    ForcedKernels forced(tile, 2);
    for (int t = 0; t < 4; ++t) {
      const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
      check_forward(rng, {5}, {1, 100, 150, 7, ta, tb, false});  // tiled: x, y and z split
      check_forward(rng, {5}, {1, 3, 100, 7, ta, tb, false});    // skinny: x and z split
      check_forward(rng, {5}, {1, 100, 3, 7, ta, tb, true});     // skinny on C^T
    }
    check_linear_grads(rng, {2, 5000, 3}, 100, true);  // column sums split along columns
  }
  // And one real overflow: 600000 columns at 8 per skinny workgroup.
  const int64_t n = 600000;
  const auto a = test::as_f32(rng.uniform(2)), b = test::as_f32(rng.uniform(n * 2));
  const ref::MatmulShape s{1, 1, n, 2, false, true, false};
  test::expect_close(matmul(test::to_gpu(a, {1, 2}), test::to_gpu(b, {n, 2}), false, true),
                     ref::matmul(a, b, s), product_atol(2), kRtol, "600000 columns");
}

// A [50000, 1024] f32 weight (205 MB, an LM head) is past lavapipe's 128 MiB storage-buffer
// range; the kernels reach it through its device address.
TEST(Linear, WeightLargerThanStorageBufferRange) {
  const int64_t out = 50000, in = 1024, rows = 3;
  std::vector<float> w(static_cast<size_t>(out * in));
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (auto& v : w) {  // a cheap generator: 205 MB of std::uniform_real_distribution is slow
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(static_cast<double>(state >> 40) / 8388608.0 - 1.0);
  }
  Rng rng(13);
  const auto x = test::as_f32(rng.uniform(rows * in));
  const auto bias = test::as_f32(rng.uniform(out));
  Tensor y =
      linear(test::to_gpu(x, {rows, in}), Tensor::from_host(std::span<const float>(w), {out, in}),
             test::to_gpu(bias, {out}));
  const auto got = y.to_double();
  ASSERT_EQ(got.size(), static_cast<size_t>(rows * out));
  // Every 97th column plus the last ones (which lie past 128 MiB), against the double reference.
  std::vector<int64_t> columns;
  for (int64_t o = 0; o < out - 8; o += 97) columns.push_back(o);
  for (int64_t o = out - 8; o < out; ++o) columns.push_back(o);
  std::vector<double> sampled, want;
  for (int64_t o : columns) {
    for (int64_t r = 0; r < rows; ++r) {
      double sum = bias[o];
      for (int64_t i = 0; i < in; ++i) sum += x[r * in + i] * static_cast<double>(w[o * in + i]);
      want.push_back(sum);
      sampled.push_back(got[r * out + o]);
    }
  }
  test::expect_close(sampled, want, product_atol(in), kRtol, "LM-head linear");
}

}  // namespace
}  // namespace vkf
