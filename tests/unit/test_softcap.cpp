// ops::softcap: forward and backward against the double reference, the reference backward
// against finite differences, determinism and bad input.
#include "ops/softcap.h"
#include "ops/softcap_ref.h"
#include "test_util.h"
#include "vk/error.h"

namespace vkf {
namespace {

TEST(Softcap, ForwardAndBackwardMatchReference) {
  test::Rng rng(11);
  for (int64_t n : {1, 7, 1000, 70001}) {
    for (double cap : {2.0, 30.0}) {
      const auto x = test::as_f32(rng.uniform(static_cast<size_t>(n), -100, 100));
      const auto dy = test::as_f32(rng.normal(static_cast<size_t>(n)));
      Tensor xt = test::to_gpu(x, {n});
      test::expect_close(ops::softcap(xt, static_cast<float>(cap)), ref::softcap(x, cap), 2e-6 * cap,
                         1e-6, "softcap forward");
      const auto grads = test::gpu_grads(
          [&](std::vector<Tensor>& in) { return ops::softcap(in[0], static_cast<float>(cap)); }, {xt},
          test::to_gpu(dy, {n}));
      test::expect_close(grads[0], ref::softcap_backward(x, dy, cap), 1e-6, 1e-5, "softcap backward");
    }
  }
}

TEST(Softcap, ReferenceBackwardMatchesFiniteDifferences) {
  test::Rng rng(12);
  const auto x = rng.uniform(9, -6, 6);
  const auto dy = rng.normal(9);
  const auto num = test::numeric_grad([](const std::vector<double>& v) { return ref::softcap(v, 3.0); }, x, dy);
  test::expect_close(ref::softcap_backward(x, dy, 3.0), num, 1e-8, 1e-6, "softcap finite differences");
}

TEST(Softcap, DeterministicAndChecksInput) {
  test::Rng rng(13);
  Tensor x = test::to_gpu(rng.uniform(4097, -50, 50), {17, 241});
  test::expect_bitwise_equal(ops::softcap(x, 5.0f), ops::softcap(x, 5.0f), "softcap");
  test::expect_error([&] { ops::softcap(x, 0.0f); }, {"softcap", "cap"});
  test::expect_error([&] { ops::softcap(Tensor::zeros({3}, DType::I32), 1.0f); }, {"softcap", "i32"});
  // A transposed view is read correctly.
  const auto want = ref::softcap(x.transpose(0, 1).contiguous().to_double(), 5.0);
  test::expect_close(ops::softcap(x.transpose(0, 1), 5.0f), want, 1e-5, 1e-6, "softcap of a view");
}

}  // namespace
}  // namespace vkf
