// Elementwise ops: broadcasting add/sub/mul (forward against the double reference on odd shapes,
// rank 0 to 6, strided views), their gradients (against the reference backward, which is itself
// checked against finite differences), scale / bias_add / residual_add / expand / add_, bitwise
// determinism of the broadcast-gradient reduction, and errors on bad input.
#include <cmath>

#include "core/autograd.h"
#include "ops/elementwise.h"
#include "ops/elementwise_ref.h"
#include "test_util.h"
#include "vk/error.h"

namespace vkf {
namespace {

using test::Rng;

struct Case {
  Shape a, b;
};

// Shapes that cover: equal shapes (flat path), scalars, size-1 and missing dims on either side,
// both operands broadcast, rank 6, and sizes that are not multiples of the 256-wide workgroup.
const Case kCases[] = {
    {{1}, {1}},
    {{7}, {7}},
    {{13, 37}, {13, 37}},
    {{3, 1, 5}, {1, 4, 5}},
    {{2, 3, 4, 5}, {5}},
    {{61}, {}},
    {{}, {}},
    {{}, {3, 7}},
    {{37, 61}, {37, 1}},
    {{1, 13}, {7, 1}},
    {{2, 1, 3, 1, 5, 2}, {1, 4, 1, 6, 5, 1}},
    {{257, 1031}, {1031}},
    {{100003}, {100003}},
};

const std::pair<ref::Binary, const char*> kOps[] = {
    {ref::Binary::Add, "add"}, {ref::Binary::Sub, "sub"}, {ref::Binary::Mul, "mul"}};

Tensor apply(ref::Binary op, const Tensor& a, const Tensor& b) {
  switch (op) {
    case ref::Binary::Add:
      return ops::add(a, b);
    case ref::Binary::Sub:
      return ops::sub(a, b);
    case ref::Binary::Mul:
      return ops::mul(a, b);
  }
  return {};
}

std::vector<double> random_f32(Rng& rng, const Shape& s) {
  return test::as_f32(rng.uniform(static_cast<size_t>(shape_numel(s)), -2.0, 2.0));
}

// One rounding of an exact double result: add, sub and mul of f32 values are correctly rounded.
constexpr double kOneRounding = 6.0e-8;

// A summed gradient is compared with a tolerance that grows with the sum of the magnitudes of its
// terms (fp32 summation error is bounded by a multiple of eps * sum |x_i|).
void expect_sum_close(const std::vector<double>& g, const std::vector<double>& want,
                      const std::vector<double>& abs_sums, const std::string& what) {
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], want[i], 1e-7 + 2e-7 * abs_sums[i]) << what << " at " << i;
}

std::vector<double> abs_values(std::vector<double> v) {
  for (double& x : v) x = std::fabs(x);
  return v;
}

TEST(Elementwise, ForwardMatchesReferenceWithBroadcasting) {
  Rng rng(11);
  for (const Case& c : kCases) {
    const auto a = random_f32(rng, c.a), b = random_f32(rng, c.b);
    const Tensor ta = test::to_gpu(a, c.a), tb = test::to_gpu(b, c.b);
    for (const auto& [op, name] : kOps) {
      const Tensor out = apply(op, ta, tb);
      ASSERT_EQ(out.shape(), ref::broadcast(c.a, c.b)) << name;
      test::expect_close(out, ref::binary(op, a, c.a, b, c.b), 0.0, kOneRounding,
                         std::string(name) + " " + shape_str(c.a) + " with " + shape_str(c.b));
    }
  }
}

TEST(Elementwise, StridedViewsAsInputs) {
  Rng rng(12);
  // a: a transposed view [37, 13] of a [13, 37] tensor; b: a column slice [37, 1] of a [37, 5].
  const auto base = random_f32(rng, {13, 37});
  const auto wide = random_f32(rng, {37, 5});
  const Tensor ta = test::to_gpu(base, {13, 37}).transpose(0, 1);
  const Tensor tb = test::to_gpu(wide, {37, 5}).slice(1, 2, 3);
  std::vector<double> a(37 * 13), b(37);
  for (int i = 0; i < 37; ++i) {
    for (int j = 0; j < 13; ++j) a[i * 13 + j] = base[j * 37 + i];
    b[i] = wide[i * 5 + 2];
  }
  for (const auto& [op, name] : kOps)
    test::expect_close(apply(op, ta, tb), ref::binary(op, a, {37, 13}, b, {37, 1}), 0.0,
                       kOneRounding, std::string(name) + " of views");
}

TEST(Elementwise, GradientsMatchReferenceAndFiniteDifferences) {
  Rng rng(13);
  const Case cases[] = {{{3, 1, 5}, {1, 4, 5}}, {{2, 3}, {3}}, {{}, {2, 3}}, {{4, 1}, {4, 1}}};
  for (const Case& c : cases) {
    const auto a = random_f32(rng, c.a), b = random_f32(rng, c.b);
    const Shape so = ref::broadcast(c.a, c.b);
    const auto dy = random_f32(rng, so);
    for (const auto& [op, name] : kOps) {
      const std::string what = std::string(name) + " " + shape_str(c.a) + " with " + shape_str(c.b);
      std::vector<double> da, db;
      ref::binary_backward(op, a, c.a, b, c.b, dy, da, db);
      // The reference backward against central differences of the reference forward.
      const auto fa = [&](const std::vector<double>& x) { return ref::binary(op, x, c.a, b, c.b); };
      const auto fb = [&](const std::vector<double>& x) { return ref::binary(op, a, c.a, x, c.b); };
      test::expect_close(da, test::numeric_grad(fa, a, dy), 1e-8, 1e-7, what + " ref da");
      test::expect_close(db, test::numeric_grad(fb, b, dy), 1e-8, 1e-7, what + " ref db");
      const auto grads =
          test::gpu_grads([op](std::vector<Tensor>& in) { return apply(op, in[0], in[1]); },
                          {test::to_gpu(a, c.a), test::to_gpu(b, c.b)}, test::to_gpu(dy, so));
      test::expect_close(grads[0], da, 1e-6, 1e-6, what + " da");
      test::expect_close(grads[1], db, 1e-6, 1e-6, what + " db");
    }
  }
}

TEST(Elementwise, SameTensorOnBothSides) {
  // mul(x, x): both inputs are one tensor, so its gradient is the sum of both paths, 2 x dy.
  const std::vector<double> x = {0.5, -1.25, 3.0};
  const auto grads = test::gpu_grads([](std::vector<Tensor>& in) { return ops::mul(in[0], in[0]); },
                                     {test::to_gpu(x, {3})}, test::to_gpu({1, 2, 3}, {3}));
  test::expect_close(grads[0], {1.0, -5.0, 18.0}, 0, 0, "d(x*x)");
}

TEST(Elementwise, ScaleBiasResidualExpand) {
  Rng rng(14);
  for (const Shape& s : {Shape{1}, Shape{7, 13}, Shape{3, 5, 61}, Shape{300, 257}}) {
    const int64_t n = s.back();
    const auto x = random_f32(rng, s), y = random_f32(rng, s), bias = random_f32(rng, {n});
    const Tensor tx = test::to_gpu(x, s), ty = test::to_gpu(y, s), tb = test::to_gpu(bias, {n});
    std::vector<double> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = x[i] * -0.37f;
    test::expect_close(ops::scale(tx, -0.37f), want, 0, kOneRounding, "scale " + shape_str(s));
    test::expect_close(ops::bias_add(tx, tb), ref::binary(ref::Binary::Add, x, s, bias, {n}), 0,
                       kOneRounding, "bias_add " + shape_str(s));
    test::expect_close(ops::residual_add(tx, ty), ref::binary(ref::Binary::Add, x, s, y, s), 0,
                       kOneRounding, "residual_add " + shape_str(s));
    // Gradients: the bias gradient sums dy over every row (the column reduction kernel when wide).
    const auto dy = random_f32(rng, s);
    const auto grads =
        test::gpu_grads([](std::vector<Tensor>& in) { return ops::bias_add(in[0], in[1]); },
                        {tx, tb}, test::to_gpu(dy, s));
    test::expect_close(grads[0], dy, 0, 0, "bias_add dx " + shape_str(s));
    expect_sum_close(grads[1], ref::sum_to_shape(dy, s, {n}),
                     ref::sum_to_shape(abs_values(dy), s, {n}), "bias_add dbias " + shape_str(s));
    const auto gs = test::gpu_grads([](std::vector<Tensor>& in) { return ops::scale(in[0], 2.5f); },
                                    {tx}, test::to_gpu(dy, s));
    std::vector<double> want_gs(dy.size());
    for (size_t i = 0; i < dy.size(); ++i) want_gs[i] = dy[i] * 2.5;
    test::expect_close(gs[0], want_gs, 0, kOneRounding, "scale grad " + shape_str(s));
  }
  // expand: forward is a broadcast copy, backward sums back.
  const auto v = random_f32(rng, {3, 1, 5});
  const Shape to = {2, 3, 4, 5};
  test::expect_close(ops::expand(test::to_gpu(v, {3, 1, 5}), to), ref::expand(v, {3, 1, 5}, to), 0,
                     0, "expand");
  const auto dy = random_f32(rng, to);
  const auto g = test::gpu_grads([to](std::vector<Tensor>& in) { return ops::expand(in[0], to); },
                                 {test::to_gpu(v, {3, 1, 5})}, test::to_gpu(dy, to));
  expect_sum_close(g[0], ref::sum_to_shape(dy, to, {3, 1, 5}),
                   ref::sum_to_shape(abs_values(dy), to, {3, 1, 5}), "expand grad");
}

TEST(Elementwise, InPlaceAdd) {
  Rng rng(15);
  const auto d = random_f32(rng, {13, 37}), s = random_f32(rng, {37});
  Tensor dst = test::to_gpu(d, {13, 37});
  ops::add_(dst, test::to_gpu(s, {37}));
  test::expect_close(dst, ref::binary(ref::Binary::Add, d, {13, 37}, s, {37}), 0, kOneRounding,
                     "add_ broadcast");
  // dst += dst doubles every element.
  ops::add_(dst, dst);
  auto twice = ref::binary(ref::Binary::Add, d, {13, 37}, s, {37});
  for (double& v : twice) v = static_cast<float>(v) * 2.0;
  test::expect_close(dst, twice, 0, kOneRounding, "add_ self");
  // dst += another view of dst's storage reads a copy, not the values being updated.
  const Tensor t = test::to_gpu({1, 2, 3, 4}, {4});
  ops::add_(t.slice(0, 1, 4), t.slice(0, 0, 3));
  test::expect_close(t, {1, 3, 5, 7}, 0, 0, "add_ of a shifted view of itself");
}

TEST(Elementwise, MoreThanOneGridRow) {
  // 2^24 + 3 elements need more than 65535 workgroups of 256: the grid folds into two dimensions.
  const int64_t n = (int64_t{1} << 24) + 3;
  std::vector<double> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    a[i] = static_cast<double>(i % 1000);
    b[i] = static_cast<double>(i / 1000);
  }
  const auto out = ops::add(test::to_gpu(a, {n}), test::to_gpu(b, {1, n})).to_double();
  ASSERT_EQ(out.size(), a.size());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]) << i;
}

TEST(Elementwise, Deterministic) {
  Rng rng(16);
  const Shape s = {300, 257};
  const Tensor x = test::to_gpu(random_f32(rng, s), s);
  const Tensor b = test::to_gpu(random_f32(rng, {257}), {257});
  const Tensor dy = test::to_gpu(random_f32(rng, s), s);
  std::vector<std::vector<double>> runs;
  for (int i = 0; i < 2; ++i) {
    const auto g =
        test::gpu_grads([](std::vector<Tensor>& in) { return ops::mul(in[0], in[1]); }, {x, b}, dy);
    runs.push_back(g[1]);  // f32 values held exactly in doubles
  }
  EXPECT_EQ(runs[0], runs[1]) << "broadcast mul gradient differs between runs";
  test::expect_bitwise_equal(ops::mul(x, b), ops::mul(x, b), "broadcast mul");
}

TEST(Elementwise, BadInputThrows) {
  const Tensor a = Tensor::zeros({3, 4});
  const Tensor ints = Tensor::zeros({3, 4}, DType::I32);
  EXPECT_THROW(ops::add(a, Tensor::zeros({5})), Error);
  EXPECT_THROW(ops::mul(a, Tensor::zeros({2, 4})), Error);
  EXPECT_THROW(ops::sub(a, ints), Error);
  EXPECT_THROW(ops::add(Tensor(), a), Error);
  EXPECT_THROW(ops::add(a, Tensor::zeros({0, 4})), Error);
  EXPECT_THROW(ops::scale(ints, 2.0f), Error);
  EXPECT_THROW(ops::bias_add(a, Tensor::zeros({3})), Error);
  EXPECT_THROW(ops::bias_add(a, Tensor::zeros({1, 4})), Error);
  EXPECT_THROW(ops::residual_add(a, Tensor::zeros({4})), Error);
  EXPECT_THROW(ops::expand(a, {4, 4}), Error);
  EXPECT_THROW(ops::expand(a, {4}), Error);
  EXPECT_THROW(ops::add_(a.transpose(0, 1), Tensor::zeros({3})), Error);
  EXPECT_THROW(ops::add_(a, Tensor::zeros({2, 3, 4})), Error);
  // Seven dimensions that cannot merge exceed the kernels' six.
  const Tensor seven = Tensor::zeros({2, 1, 2, 1, 2, 1, 2});
  EXPECT_THROW(ops::add(seven, Tensor::zeros({1, 2, 1, 2, 1, 2, 1})), Error);
  test::expect_error([&] { ops::add(a, Tensor::zeros({5})); }, {"add", "[3, 4]", "[5]"});
}

}  // namespace
}  // namespace vkf
