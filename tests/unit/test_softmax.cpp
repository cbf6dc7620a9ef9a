// Softmax and log-softmax over the last dimension: forward and backward against the double
// reference on rows of length 1 to 100003 (short rows several to a workgroup, long rows one per
// workgroup), huge and -inf inputs, strided inputs, the reference backward against finite
// differences, determinism and errors on bad input.
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "ops/softmax.h"
#include "ops/softmax_ref.h"
#include "test_util.h"
#include "vk/error.h"

namespace vkf {
namespace {

using test::Rng;

// Row lengths: 1, primes, either side of the 1024 short-row threshold, and a vocabulary-sized
// 100003; row counts that do not fill the last workgroup.
const Shape kShapes[] = {{1},          {7},          {5, 1},    {13, 37},   {1001, 7},
                         {3, 5, 1024}, {2, 3, 1025}, {3, 1031}, {3, 100003}};

std::vector<double> logits(Rng& rng, const Shape& s) {
  return test::as_f32(rng.normal(static_cast<size_t>(shape_numel(s)), 3.0));
}

TEST(Softmax, ForwardMatchesReference) {
  Rng rng(31);
  for (const Shape& s : kShapes) {
    const auto x = logits(rng, s);
    const Tensor tx = test::to_gpu(x, s);
    const int64_t len = s.back();
    const Tensor p = ops::softmax(tx);
    EXPECT_EQ(p.shape(), s);
    test::expect_close(p, ref::softmax(x, len), 1e-9, 2e-6, "softmax " + shape_str(s));
    test::expect_close(ops::log_softmax(tx), ref::log_softmax(x, len), 2e-6, 2e-7,
                       "log_softmax " + shape_str(s));
  }
}

TEST(Softmax, StableForHugeAndMaskedLogits) {
  const double inf = std::numeric_limits<double>::infinity();
  // Row 0: huge values (exp would overflow without the max shift). Row 1: masked entries (-inf)
  // get probability 0. Row 2: all equal.
  const std::vector<double> x = {1e4,  1e4 - 1, 1e4 - 3, -1e4, 88.5, -inf, 0.5, -inf,
                                 -2.0, -inf,    3.0,     3.0,  3.0,  3.0,  3.0};
  const Tensor tx = test::to_gpu(x, {3, 5});
  test::expect_close(ops::softmax(tx), ref::softmax(x, 5), 1e-9, 1e-6, "softmax");
  const auto ls = ops::log_softmax(tx).to_double();
  const auto want = ref::log_softmax(x, 5);
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_EQ(ls[i], want[i]) << i;
    } else {
      EXPECT_NEAR(ls[i], want[i], 2e-6 + 1.2e-7 * std::fabs(want[i])) << i;
    }
  }
}

TEST(Softmax, StridedInput) {
  Rng rng(32);
  const auto base = logits(rng, {37, 13});
  std::vector<double> t(base.size());
  for (int i = 0; i < 37; ++i)
    for (int j = 0; j < 13; ++j) t[j * 37 + i] = base[i * 13 + j];
  const Tensor view = test::to_gpu(base, {37, 13}).transpose(0, 1);  // rows of 37 along a stride
  test::expect_close(ops::softmax(view), ref::softmax(t, 37), 1e-9, 2e-6, "softmax of a view");
}

TEST(Softmax, GradientsMatchReferenceAndFiniteDifferences) {
  Rng rng(33);
  for (const Shape& s : {Shape{1}, Shape{5, 1}, Shape{13, 37}, Shape{3, 1024}, Shape{2, 1031}}) {
    const auto x = logits(rng, s);
    const auto dy = test::as_f32(rng.uniform(x.size(), -1, 1));
    const int64_t len = s.back();
    const auto gs = test::gpu_grads([](std::vector<Tensor>& in) { return ops::softmax(in[0]); },
                                    {test::to_gpu(x, s)}, test::to_gpu(dy, s));
    test::expect_close(gs[0], ref::softmax_backward(x, dy, len), 1e-7, 4e-6,
                       "softmax grad " + shape_str(s));
    const auto gl = test::gpu_grads([](std::vector<Tensor>& in) { return ops::log_softmax(in[0]); },
                                    {test::to_gpu(x, s)}, test::to_gpu(dy, s));
    test::expect_close(gl[0], ref::log_softmax_backward(x, dy, len), 2e-6, 4e-6,
                       "log_softmax grad " + shape_str(s));
  }
  // The reference backward against central differences of the reference forward.
  const std::vector<double> x = {0.3, -1.2, 2.5, 0.0, -0.7, 1.1, 0.4, -2.0, 0.9, 0.05};
  const std::vector<double> dy = {0.5, -1.0, 0.25, 2.0, -0.75, 1.5, -0.5, 0.1, 0.3, -0.2};
  for (int64_t len : {5, 10}) {
    test::expect_close(
        ref::softmax_backward(x, dy, len),
        test::numeric_grad([len](const std::vector<double>& v) { return ref::softmax(v, len); }, x,
                           dy),
        1e-8, 1e-7, "reference softmax grad");
    test::expect_close(
        ref::log_softmax_backward(x, dy, len),
        test::numeric_grad([len](const std::vector<double>& v) { return ref::log_softmax(v, len); },
                           x, dy),
        1e-8, 1e-7, "reference log_softmax grad");
  }
}

TEST(Softmax, MoreRowsThanOneGridRow) {
  // 600001 short rows, 8 to a workgroup, need more workgroups than one grid row holds (65535):
  // the grid folds into two dimensions.
  Rng rng(35);
  const Shape s = {600001, 3};
  const auto x = logits(rng, s);
  test::expect_close(ops::softmax(test::to_gpu(x, s)), ref::softmax(x, 3), 1e-9, 2e-6,
                     "softmax " + shape_str(s));
}

TEST(Softmax, Deterministic) {
  Rng rng(34);
  const Shape s = {3, 100003};
  const Tensor x = test::to_gpu(logits(rng, s), s);
  test::expect_bitwise_equal(ops::softmax(x), ops::softmax(x), "softmax");
  test::expect_bitwise_equal(ops::log_softmax(x), ops::log_softmax(x), "log_softmax");
  const Tensor dy = test::to_gpu(test::as_f32(rng.uniform(3 * 100003, -1, 1)), s);
  const auto a =
      test::gpu_grads([](std::vector<Tensor>& in) { return ops::softmax(in[0]); }, {x}, dy);
  const auto b =
      test::gpu_grads([](std::vector<Tensor>& in) { return ops::softmax(in[0]); }, {x}, dy);
  EXPECT_EQ(a[0], b[0]) << "softmax gradient differs between runs";
}

TEST(Softmax, BadInputThrows) {
  EXPECT_THROW(ops::softmax(Tensor()), Error);
  EXPECT_THROW(ops::softmax(Tensor::zeros({}, DType::F32)), Error);
  EXPECT_THROW(ops::log_softmax(Tensor::zeros({3, 4}, DType::I32)), Error);
  EXPECT_THROW(ops::softmax(Tensor::zeros({3, 0})), Error);
  test::expect_error(
      [&] {
        ops::log_softmax(Tensor::zeros({2, 5}, DType::BF16));
      },
      {"log_softmax", "bf16"});
}

}  // namespace
}  // namespace vkf
