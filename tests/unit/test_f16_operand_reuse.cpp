// Reuse of f16 operand copies in mixed precision (ops::detail::F16OperandReuse, and the public
// ops::SharedF16Inputs over it): products inside a scope convert a shared operand once, give the
// bits they give without the scope, and never take a stale copy for a new tensor. On the emulated
// tensor-core kernel, so that lavapipe runs the path the H200 runs.
#include <string>

#include "emulated_f16.h"
#include "ops/matmul.h"
#include "ops/matmul_coopmat.h"
#include "ops/matmul_kernels.h"
#include "test_util.h"
#include "vk/context.h"

namespace vkf {
namespace {

using test::EmulatedF16;
using test::Rng;

// F16OperandReuse: inside a Use, a product whose operands were converted under the same object
// converts nothing again and gives the same bits; outside, it converts as before.
TEST(F16OperandReuse, ConvertsOnce) {
  const EmulatedF16 f16;
  Rng rng(36);
  const Tensor a = test::to_gpu(rng.normal(40 * 24, 1.0), {40, 24});
  const Tensor b = test::to_gpu(rng.normal(24 * 32, 1.0), {24, 32});
  auto& stream = vk::Context::get().stream();
  auto product = [&](const Tensor& out) {
    const uint64_t before = stream.dispatch_count();
    ops::detail::gemm(ops::detail::describe_rows(a), ops::detail::describe_rows(b),
                      ops::detail::describe_rows(out), 1.0f, 0.0f);
    return stream.dispatch_count() - before;
  };
  const Tensor plain = Tensor::empty({40, 32}), first = Tensor::empty({40, 32}),
               second = Tensor::empty({40, 32});
  const uint64_t plain_dispatches = product(plain);
  ops::detail::F16OperandReuse reuse;
  uint64_t first_dispatches = 0, second_dispatches = 0;
  {
    const ops::detail::F16OperandReuse::Use use(reuse);
    first_dispatches = product(first);
    second_dispatches = product(second);
  }
  EXPECT_EQ(reuse.size(), 2u);  // a and b
  EXPECT_EQ(first_dispatches, plain_dispatches);
  EXPECT_EQ(second_dispatches + 2, first_dispatches);  // no conversion of a or b
  test::expect_bitwise_equal(first, plain, "first product");
  test::expect_bitwise_equal(second, plain, "second product");
}

// ops::SharedF16Inputs: the products of one input inside the scope convert it once and give the
// bits they give outside; a tensor dropped inside the scope keeps its address (its copy holds it),
// so a new tensor of the same shape is converted afresh, not mistaken for it.
TEST(F16OperandReuse, SharedF16InputsConvertOnceAndNeverAlias) {
  const EmulatedF16 f16;
  ASSERT_TRUE(ops::detail::f16_operands_active());
  Rng rng(121);
  const Tensor x = test::to_gpu(rng.uniform(40 * 32), {40, 32});
  const Tensor wq = test::to_gpu(rng.uniform(48 * 32), {48, 32});
  const Tensor wk = test::to_gpu(rng.uniform(24 * 32), {24, 32});
  const Tensor q0 = ops::linear(x, wq), k0 = ops::linear(x, wk);
  auto& stream = vk::Context::get().stream();
  const uint64_t before = stream.dispatch_count();
  Tensor q1, k1;
  {
    const ops::SharedF16Inputs shared;
    q1 = ops::linear(x, wq);
    const uint64_t after_q = stream.dispatch_count();
    k1 = ops::linear(x, wk);
    // The second product converts its weight, not x again: one dispatch fewer than the first.
    EXPECT_EQ(stream.dispatch_count() - after_q + 1, after_q - before);
    for (int i = 0; i < 3; ++i) {
      SCOPED_TRACE("temporary " + std::to_string(i));
      const auto values = rng.uniform(40 * 32);
      const Tensor t = test::to_gpu(values, {40, 32});
      test::expect_bitwise_equal(
          ops::linear(t, wq),
          [&] {
            ops::detail::set_coopmat_f16_operands(false);  // converted in the kernel: no copies
            const Tensor y = ops::linear(test::to_gpu(values, {40, 32}), wq);
            ops::detail::set_coopmat_f16_operands(true);
            return y;
          }(),
          "a fresh temporary");
    }
  }
  test::expect_bitwise_equal(q1, q0, "q");
  test::expect_bitwise_equal(k1, k0, "k");
}

}  // namespace
}  // namespace vkf
