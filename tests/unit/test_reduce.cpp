// Reductions: sum / mean over everything (one and two levels, up to a million elements), sum over
// one dimension and sum_to_shape (each kernel variant: serial, per-workgroup, column), their
// gradients, the global L2 norm and clip_grad_norm_ (clipping and not, tensors of mixed sizes
// beyond 1M elements) against double references, bitwise determinism and errors on bad input.
// Sums are compared with a tolerance proportional to sum |x_i|, the scale of fp32 summation error.
#include <cmath>

#include "core/autograd.h"
#include "ops/elementwise_ref.h"
#include "ops/reduce.h"
#include "ops/reduce_ref.h"
#include "test_util.h"
#include "vk/error.h"

namespace vkf {
namespace {

using test::Rng;

std::vector<double> random_f32(Rng& rng, const Shape& s) {
  return test::as_f32(rng.uniform(static_cast<size_t>(shape_numel(s)), -1.0, 1.0));
}

std::vector<double> abs_values(std::vector<double> v) {
  for (double& x : v) x = std::fabs(x);
  return v;
}

void expect_sums_close(const std::vector<double>& got, const std::vector<double>& want,
                       const std::vector<double>& abs_sums, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-7 + 2e-7 * abs_sums[i]) << what << " at " << i;
}

TEST(Reduce, SumAndMeanOfEverything) {
  Rng rng(41);
  // One chunk, exactly one chunk (4096), one more, two levels, and a million elements.
  for (const Shape& s : {Shape{}, Shape{1}, Shape{7}, Shape{13, 37}, Shape{4096}, Shape{4097},
                         Shape{3, 100003}, Shape{(1 << 20) + 3}}) {
    const auto x = random_f32(rng, s);
    const Tensor tx = test::to_gpu(x, s);
    const double abs_sum = ref::sum(abs_values(x));
    const Tensor total = ops::sum(tx);
    EXPECT_EQ(total.shape(), Shape{}) << shape_str(s);
    expect_sums_close(total.to_double(), {ref::sum(x)}, {abs_sum}, "sum " + shape_str(s));
    const double n = static_cast<double>(x.size());
    expect_sums_close(ops::mean(tx).to_double(), {ref::mean(x)}, {abs_sum / n},
                      "mean " + shape_str(s));
  }
  // A strided view sums its own elements.
  const auto base = random_f32(rng, {13, 37});
  const Tensor view = test::to_gpu(base, {13, 37}).slice(1, 3, 20);
  std::vector<double> picked;
  for (int i = 0; i < 13; ++i)
    for (int j = 3; j < 20; ++j) picked.push_back(base[i * 37 + j]);
  expect_sums_close(ops::sum(view).to_double(), {ref::sum(picked)}, {ref::sum(abs_values(picked))},
                    "sum of a view");
}

struct DimCase {
  Shape shape;
  int dim;
};

TEST(Reduce, SumOverOneDimension) {
  Rng rng(42);
  // Every reduce_sum variant: serial (<= 16 long), 32 lanes per output (<= 1024), 256 lanes per
  // output (longer; reduced dim innermost or strided) and column sums.
  const DimCase cases[] = {{{13, 37}, 0},     {{13, 37}, 1},     {{13, 37}, -1}, {{3, 1, 5}, 1},
                           {{2, 3, 129}, -1}, {{1001, 7}, -1},   {{7, 1001}, 1}, {{300, 257}, 0},
                           {{4, 61, 3}, 1},   {{5, 100003}, -1}, {{1}, 0},       {{7}, 0},
                           {{2, 3000, 2}, 1}, {{3, 1025}, 1}};
  for (const DimCase& c : cases) {
    const auto x = random_f32(rng, c.shape);
    const int d = c.dim < 0 ? c.dim + static_cast<int>(c.shape.size()) : c.dim;
    const std::string what = "sum " + shape_str(c.shape) + " dim " + std::to_string(c.dim);
    Shape out_shape = c.shape;
    out_shape.erase(out_shape.begin() + d);
    const Tensor y = ops::sum(test::to_gpu(x, c.shape), c.dim);
    EXPECT_EQ(y.shape(), out_shape) << what;
    expect_sums_close(y.to_double(), ref::sum_dim(x, c.shape, d),
                      ref::sum_dim(abs_values(x), c.shape, d), what);
    Shape keep_shape = c.shape;
    keep_shape[d] = 1;
    EXPECT_EQ(ops::sum(test::to_gpu(x, c.shape), c.dim, true).shape(), keep_shape) << what;
  }
}

TEST(Reduce, SumToShape) {
  Rng rng(43);
  const std::pair<Shape, Shape> cases[] = {
      {{37, 61}, {37, 1}},       {{300, 257}, {257}}, {{8, 3, 5}, {3, 5}},
      {{2, 3, 4, 5}, {3, 1, 5}}, {{13, 37}, {}},      {{13, 37}, {1, 1}},
      {{7, 1, 5}, {1, 5}},       {{5, 2000}, {5, 1}}, {{3, 4}, {3, 4}}};
  for (const auto& [from, to] : cases) {
    const auto x = random_f32(rng, from);
    const std::string what = "sum_to_shape " + shape_str(from) + " -> " + shape_str(to);
    const Tensor y = ops::sum_to_shape(test::to_gpu(x, from), to);
    EXPECT_EQ(y.shape(), to) << what;
    expect_sums_close(y.to_double(), ref::sum_to_shape(x, from, to),
                      ref::sum_to_shape(abs_values(x), from, to), what);
  }
}

TEST(Reduce, Gradients) {
  Rng rng(44);
  const Shape s = {13, 37};
  const auto x = random_f32(rng, s);
  const Tensor tx = test::to_gpu(x, s);
  const double seed = 0.75;
  const auto gs = test::gpu_grads([](std::vector<Tensor>& in) { return ops::sum(in[0]); }, {tx},
                                  test::to_gpu({seed}, {}));
  test::expect_close(gs[0], std::vector<double>(x.size(), seed), 0, 0, "sum grad");
  const auto gm = test::gpu_grads([](std::vector<Tensor>& in) { return ops::mean(in[0]); }, {tx},
                                  test::to_gpu({seed}, {}));
  test::expect_close(gm[0], std::vector<double>(x.size(), seed / x.size()), 0, 1.2e-7, "mean grad");
  // A scalar root needs no seed.
  const auto g1 =
      test::gpu_grads([](std::vector<Tensor>& in) { return ops::sum(in[0]); }, {tx}, {});
  test::expect_close(g1[0], std::vector<double>(x.size(), 1.0), 0, 0, "sum grad, implicit seed");
  for (int dim : {0, 1}) {
    Shape so = s;
    so.erase(so.begin() + dim);
    const auto dy = random_f32(rng, so);
    const auto g = test::gpu_grads([dim](std::vector<Tensor>& in) { return ops::sum(in[0], dim); },
                                   {tx}, test::to_gpu(dy, so));
    const auto want = ref::sum_dim_backward(dy, s, dim);
    test::expect_close(g[0], want, 0, 0, "sum dim grad");
    const auto num = test::numeric_grad(
        [dim, s](const std::vector<double>& v) { return ref::sum_dim(v, s, dim); }, x, dy);
    test::expect_close(want, num, 1e-8, 1e-7, "reference sum dim grad");
  }
  // sum_to_shape's gradient broadcasts back.
  const auto dy = random_f32(rng, {37, 1});
  const auto g = test::gpu_grads(
      [](std::vector<Tensor>& in) {
        return ops::sum_to_shape(in[0], {37, 1});
      },
      {test::to_gpu(random_f32(rng, {37, 61}), {37, 61})}, test::to_gpu(dy, {37, 1}));
  test::expect_close(g[0], ref::expand(dy, {37, 1}, {37, 61}), 0, 0, "sum_to_shape grad");
}

// Tensors of mixed sizes, one over a million elements and one a strided view.
struct NormInputs {
  std::vector<std::vector<double>> values;
  std::vector<Tensor> tensors;
};

NormInputs norm_inputs(Rng& rng) {
  NormInputs in;
  for (const Shape& s : {Shape{7}, Shape{13, 37}, Shape{1}, Shape{(1 << 20) + 5}, Shape{4096}}) {
    in.values.push_back(random_f32(rng, s));
    in.tensors.push_back(test::to_gpu(in.values.back(), s));
  }
  return in;
}

TEST(Reduce, GlobalL2Norm) {
  Rng rng(45);
  NormInputs in = norm_inputs(rng);
  // Add a strided view: every other column of a [61, 10] tensor.
  const auto base = random_f32(rng, {61, 10});
  std::vector<double> cols;
  for (int i = 0; i < 61; ++i)
    for (int j = 0; j < 10; j += 2) cols.push_back(base[i * 10 + j]);
  Tensor strided = test::to_gpu(base, {61, 5, 2}).slice(2, 0, 1);
  in.values.push_back(cols);
  in.tensors.push_back(strided);
  const Tensor norm = ops::global_l2_norm(in.tensors);
  EXPECT_EQ(norm.shape(), Shape{});
  const double want = ref::global_l2_norm(in.values);
  EXPECT_NEAR(norm.item(), want, 2e-6 * want);
  test::expect_bitwise_equal(norm, ops::global_l2_norm(in.tensors), "global_l2_norm");
  // Gradient: x / norm times the seed, for every tensor.
  const std::vector<double> a = {0.3, -1.2, 2.5}, b = {0.5, 0.0, -0.25, 1.0};
  const double seed = 1.5;
  const auto g = test::gpu_grads(
      [](std::vector<Tensor>& t) {
        return ops::global_l2_norm({t[0], t[1]});
      },
      {test::to_gpu(a, {3}), test::to_gpu(b, {2, 2})}, test::to_gpu({seed}, {}));
  const double n = ref::global_l2_norm({a, b});
  std::vector<double> ga, gb;
  for (double v : a) ga.push_back(seed * v / n);
  for (double v : b) gb.push_back(seed * v / n);
  test::expect_close(g[0], ga, 1e-7, 1e-6, "norm grad a");
  test::expect_close(g[1], gb, 1e-7, 1e-6, "norm grad b");
  // That reference gradient against finite differences of the norm.
  std::vector<double> ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  std::vector<double> gab = ga;
  gab.insert(gab.end(), gb.begin(), gb.end());
  const auto num = test::numeric_grad(
      [](const std::vector<double>& v) { return std::vector<double>{ref::global_l2_norm({v})}; },
      ab, {seed});
  test::expect_close(gab, num, 1e-8, 1e-7, "reference norm grad");
  // The gradient at a zero norm is zero, not NaN.
  const auto gz = test::gpu_grads(
      [](std::vector<Tensor>& t) { return ops::global_l2_norm({t[0]}); }, {Tensor::zeros({3})}, {});
  test::expect_close(gz[0], {0, 0, 0}, 0, 0, "norm grad at zero");
}

TEST(Reduce, ClipGradNormScalesOnlyWhenAboveMax) {
  Rng rng(46);
  const NormInputs in = norm_inputs(rng);
  const double total = ref::global_l2_norm(in.values);
  // Not clipping: the factor is exactly 1, so gradients keep their bits.
  {
    std::vector<Tensor> grads;
    for (size_t i = 0; i < in.values.size(); ++i)
      grads.push_back(test::to_gpu(in.values[i], in.tensors[i].shape()));
    const Tensor norm = ops::clip_grad_norm_(grads, static_cast<float>(total * 2));
    EXPECT_NEAR(norm.item(), total, 2e-6 * total);
    for (size_t i = 0; i < grads.size(); ++i)
      test::expect_close(grads[i], in.values[i], 0, 0, "unclipped grad " + std::to_string(i));
  }
  // Clipping to a quarter of the norm.
  {
    std::vector<Tensor> grads;
    for (size_t i = 0; i < in.values.size(); ++i)
      grads.push_back(test::to_gpu(in.values[i], in.tensors[i].shape()));
    const double max_norm = static_cast<float>(total / 4);
    auto want = in.values;
    const double ref_norm = ref::clip_grad_norm(want, max_norm);
    const Tensor norm = ops::clip_grad_norm_(grads, static_cast<float>(max_norm));
    EXPECT_NEAR(norm.item(), ref_norm, 2e-6 * ref_norm);
    for (size_t i = 0; i < grads.size(); ++i)
      test::expect_close(grads[i], want[i], 1e-9, 3e-6, "clipped grad " + std::to_string(i));
    // The clipped gradients now have norm max_norm (up to the 1e-6 in the factor).
    EXPECT_NEAR(ops::global_l2_norm(grads).item(), max_norm, 3e-6 * max_norm);
  }
}

TEST(Reduce, MoreOutputsThanOneGridRow) {
  // 600001 rows of 17, 8 to a workgroup: more than the 65535 workgroups of one grid row, so the
  // grid folds into two dimensions.
  Rng rng(48);
  const Shape s = {600001, 17};
  const auto x = random_f32(rng, s);
  expect_sums_close(ops::sum(test::to_gpu(x, s), -1).to_double(), ref::sum_dim(x, s, 1),
                    ref::sum_dim(abs_values(x), s, 1), "sum of 70001 rows");
}

TEST(Reduce, Deterministic) {
  Rng rng(47);
  const Shape big = {(1 << 20) + 3};
  const Tensor x = test::to_gpu(random_f32(rng, big), big);
  test::expect_bitwise_equal(ops::sum(x), ops::sum(x), "sum");
  test::expect_bitwise_equal(ops::mean(x), ops::mean(x), "mean");
  const Tensor m = test::to_gpu(random_f32(rng, {300, 257}), {300, 257});
  test::expect_bitwise_equal(ops::sum(m, 0), ops::sum(m, 0), "sum dim 0");
  test::expect_bitwise_equal(ops::sum(m, 1), ops::sum(m, 1), "sum dim 1");
}

TEST(Reduce, BadInputThrows) {
  const Tensor a = Tensor::zeros({3, 4});
  const Tensor ints = Tensor::zeros({3, 4}, DType::I32);
  EXPECT_THROW(ops::sum(Tensor()), Error);
  EXPECT_THROW(ops::mean(ints), Error);
  EXPECT_THROW(ops::sum(Tensor::zeros({0, 4})), Error);
  EXPECT_THROW(ops::sum(a, 2), Error);
  EXPECT_THROW(ops::sum(a, -3), Error);
  EXPECT_THROW(ops::sum(Tensor::zeros({}), 0), Error);
  EXPECT_THROW(ops::sum_to_shape(a, {2, 4}), Error);
  EXPECT_THROW(ops::sum_to_shape(a, {1, 3, 4}), Error);
  EXPECT_THROW(ops::global_l2_norm({}), Error);
  EXPECT_THROW(ops::global_l2_norm({a, Tensor()}), Error);
  EXPECT_THROW(ops::global_l2_norm({a, ints}), Error);
  EXPECT_THROW(ops::clip_grad_norm_({a}, -1.0f), Error);
  EXPECT_THROW(ops::clip_grad_norm_({a}, NAN), Error);
  EXPECT_THROW(ops::clip_grad_norm_({a.transpose(0, 1)}, 1.0f), Error);
  EXPECT_THROW(ops::clip_grad_norm_({a, a}, 1.0f), Error);
  try {
    ops::sum(a, 5);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dim 5"), std::string::npos) << e.what();
  }
  try {
    ops::global_l2_norm({a, ints});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensors[1]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vkf
