// The RMSNorm computed in the prologue of decode's skinny f16 products (ops::rms_norm_linear,
// ops::rms_norm_gated_linear; matmul_skinny_f16.comp's norm variants). Their promise is bitwise:
// one dispatch giving exactly the floats of ops::rms_norm followed by ops::linear / ops::gated_linear,
// for row lengths whose norm runs 8, 16, 128 and 256 threads per row (H = 64, 100, 576, 2048; 100
// also reads the weight half by half), 1, 3, 5 and 8 rows, w and (1 + w) scaling, with and without
// a bias, in the fast and the precise (fp64) builds. Both also follow the double-precision
// reference (ref::rms_norm, then ref::linear / ref::gated). Where the prologue does not apply (f32
// weights, more than 8 rows, x whose rows are not 16-byte aligned while the weight's are, the
// prologue switched off, as CPU devices have it by default) the ops run the composed path, still
// bitwise equal. Bad input is refused by name.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/launch.h"
#include "ops/activation_ref.h"
#include "ops/decode.h"
#include "ops/matmul.h"
#include "ops/matmul_ref.h"
#include "ops/norm.h"
#include "ops/norm_ref.h"
#include "test_util.h"
#include "vk/context.h"

namespace vkf {
namespace {

using test::Rng;

uint64_t dispatches() { return vk::Context::get().stream().dispatch_count(); }

// f16 weights rounded on the host, as doubles and as a device tensor.
std::pair<std::vector<double>, Tensor> half_weights(Rng& rng, int64_t rows, int64_t cols) {
  const auto v = rng.uniform(static_cast<size_t>(rows * cols));
  std::vector<uint16_t> bits(v.size());
  std::vector<double> values(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    bits[i] = f32_to_f16_bits(static_cast<float>(v[i]));
    values[i] = f16_bits_to_f32(bits[i]);
  }
  return {values, Tensor::from_bytes(bits.data(), DType::F16, {rows, cols})};
}

struct Case {
  int64_t h, rows;
  bool one_plus, bias;
};

// One input's fused results against the composed ops (bitwise) and the reference (close); the
// fused calls must each be one dispatch.
void check_case(Rng& rng, const Case& c, const std::string& what) {
  const int64_t out = 20;  // not a multiple of the kernel's 8 weight rows per workgroup
  // A spread of magnitudes, so that the statistic is not trivially 1.
  const auto x = test::as_f32(rng.normal(static_cast<size_t>(c.rows * c.h), 3.0));
  const auto nw = test::as_f32(rng.uniform(static_cast<size_t>(c.h), c.one_plus ? -0.5 : 0.5,
                                           c.one_plus ? 0.5 : 1.5));
  const auto b = c.bias ? test::as_f32(rng.uniform(static_cast<size_t>(out))) : std::vector<double>{};
  const auto [w, wt] = half_weights(rng, out, c.h);
  const auto [u, ut] = half_weights(rng, out, c.h);
  const float eps = 1e-5f;
  const ops::RmsNormed in{test::to_gpu(x, {c.rows, 1, c.h}), test::to_gpu(nw, {c.h}), eps,
                          c.one_plus};
  const Tensor bias = c.bias ? test::to_gpu(b, {out}) : Tensor();
  ASSERT_TRUE(ops::norm_prologue_applies(in, wt)) << what;

  const uint64_t d0 = dispatches();
  const Tensor fused = ops::rms_norm_linear(in, wt, bias);
  const uint64_t d1 = dispatches();
  const Tensor fused_gated = ops::rms_norm_gated_linear(in, wt, ut, ops::Activation::SiLU);
  EXPECT_EQ(d1 - d0, 1u) << what << ": rms_norm_linear is one dispatch";
  EXPECT_EQ(dispatches() - d1, 1u) << what << ": rms_norm_gated_linear is one dispatch";
  EXPECT_EQ(fused.shape(), (Shape{c.rows, 1, out}));

  const Tensor normed = ops::rms_norm(in.x, in.weight, eps, c.one_plus);
  test::expect_bitwise_equal(fused, ops::linear(normed, wt, bias), what + " plain");
  test::expect_bitwise_equal(fused_gated, ops::gated_linear(normed, wt, ut, ops::Activation::SiLU),
                             what + " gated");

  const auto n = ref::rms_norm(x, nw, c.rows, c.h, eps, c.one_plus);
  test::expect_close(fused, ref::linear(n, w, b, c.rows, c.h, out), 1e-4, 1e-4,
                     what + " plain vs reference");
  test::expect_close(fused_gated,
                     ref::gated(ops::Activation::SiLU, ref::linear(n, w, {}, c.rows, c.h, out),
                                ref::linear(n, u, {}, c.rows, c.h, out)),
                     1e-4, 1e-4, what + " gated vs reference");
}

std::string describe(const Case& c, MathMode mode) {
  return "H " + std::to_string(c.h) + " rows " + std::to_string(c.rows) +
         (c.one_plus ? " (1 + w)" : " w") + (c.bias ? " bias" : "") +
         (mode == MathMode::Precise ? " precise" : " fast");
}

// Turns the prologue on (CPU devices such as lavapipe default to off), and restores the math
// mode and the device's default however a test ends.
struct SettingsGuard {
  MathMode mode = math_mode();
  SettingsGuard() { ops::set_norm_prologue(true); }
  ~SettingsGuard() {
    set_math_mode(mode);
    ops::set_norm_prologue(std::nullopt);
  }
};

// Each row count is a pipeline of its own, which lavapipe compiles slowly (seconds for the
// 16-byte-load kernels with several rows), so the cases are chosen to cover each part once: the
// 16-byte loads (H a multiple of 8) with one and two rows and the norm's 8, 128 and 256 threads
// per row; the half-by-half loads (H = 100, 16 threads per row) with 3 rows and with the kernel's
// largest, 8; both scalings, with and without a bias. DecodeStep.NormPrologueDropsTheNormDispatches
// adds whole models.
TEST(NormPrologue, BitwiseTheComposedPath) {
  SettingsGuard guard;
  Rng rng(71);
  const std::pair<MathMode, Case> cases[] = {
      {MathMode::Fast, {2048, 1, false, false}},    {MathMode::Fast, {64, 2, true, true}},
      {MathMode::Fast, {576, 1, false, true}},      {MathMode::Fast, {100, 3, true, true}},
      {MathMode::Fast, {100, 8, false, false}},     {MathMode::Precise, {576, 1, true, true}},
      {MathMode::Precise, {100, 5, false, true}}};
  for (const auto& [mode, c] : cases) {
    set_math_mode(mode);
    check_case(rng, c, describe(c, mode));
  }
}

TEST(NormPrologue, ComposedPathWhereItDoesNotApply) {
  SettingsGuard guard;
  Rng rng(72);
  const int64_t h = 64, out = 12;
  auto make = [&](int64_t rows) {
    return ops::RmsNormed{test::to_gpu(test::as_f32(rng.normal(static_cast<size_t>(rows * h))),
                                       {rows, 1, h}),
                          test::to_gpu(test::as_f32(rng.uniform(static_cast<size_t>(h), 0.5, 1.5)),
                                       {h}),
                          1e-6f,
                          false};
  };
  const Tensor w16 = half_weights(rng, out, h).second;
  const Tensor u16 = half_weights(rng, out, h).second;
  // `copies`: dispatches rms_norm spends making x contiguous first.
  auto expect_composed = [&](const ops::RmsNormed& in, const Tensor& w, const Tensor& u,
                             const std::string& what, uint64_t copies = 0) {
    EXPECT_FALSE(ops::norm_prologue_applies(in, w)) << what;
    const Tensor normed = ops::rms_norm(in.x, in.weight, in.eps, in.one_plus);
    const uint64_t d0 = dispatches();
    const Tensor got = ops::rms_norm_linear(in, w, {});
    EXPECT_EQ(dispatches() - d0, 2u + copies) << what << ": rms_norm, then the product";
    test::expect_bitwise_equal(got, ops::linear(normed, w, {}), what);
    test::expect_bitwise_equal(ops::rms_norm_gated_linear(in, w, u, ops::Activation::GELUTanh),
                               ops::gated_linear(normed, w, u, ops::Activation::GELUTanh),
                               what + " gated");
  };
  // f32 weights: the skinny f32 kernel.
  expect_composed(make(1), w16.to(DType::F32), u16.to(DType::F32), "f32 weights");
  // 9 rows: past the skinny kernel's 8.
  expect_composed(make(9), w16, u16, "9 rows");
  // Rows that start off 16-byte alignment while the weight allows 16-byte loads: the fused
  // kernel would sum in another order than the product of the stored norm, so it stands aside.
  {
    const Tensor wide = test::to_gpu(test::as_f32(rng.normal(static_cast<size_t>(h + 1))),
                                     {1, 1, h + 1});
    ops::RmsNormed in = make(1);
    in.x = wide.slice(2, 1, h + 1);
    expect_composed(in, w16, u16, "unaligned rows", in.x.is_contiguous() ? 0 : 1);
  }
  // Rows with a stride (of an odd length, read half by half): the prologue reads them in place.
  {
    const int64_t odd = 36;
    const Tensor wide = test::to_gpu(test::as_f32(rng.normal(static_cast<size_t>(2 * (odd + 3)))),
                                     {2, 1, odd + 3});
    const ops::RmsNormed in{wide.slice(2, 0, odd),
                            test::to_gpu(test::as_f32(rng.uniform(static_cast<size_t>(odd), 0.5, 1.5)), {odd}), 1e-6f,
                            false};
    const Tensor w = half_weights(rng, out, odd).second, u = half_weights(rng, out, odd).second;
    ASSERT_TRUE(ops::norm_prologue_applies(in, w));
    const Tensor normed = ops::rms_norm(in.x, in.weight, in.eps, in.one_plus);
    test::expect_bitwise_equal(ops::rms_norm_linear(in, w, {}), ops::linear(normed, w, {}),
                               "strided rows");
    test::expect_bitwise_equal(ops::rms_norm_gated_linear(in, w, u, ops::Activation::SiLU),
                               ops::gated_linear(normed, w, u, ops::Activation::SiLU),
                               "strided rows, gated");
  }
  // Switched off (the benchmarks' comparison).
  ops::set_norm_prologue(false);
  expect_composed(make(1), w16, u16, "prologue off");
}

TEST(NormPrologue, BadInput) {
  const Tensor w = Tensor::zeros({3, 8}).to(DType::F16);
  const Tensor x = Tensor::zeros({2, 8});
  test::expect_error(
      [&] { ops::rms_norm_linear({x, Tensor::zeros({7}), 1e-6f, false}, w, {}); },
      {"rms_norm_linear", "RMSNorm weight", "[8]"});
  test::expect_error([&] { ops::rms_norm_linear({x, Tensor::zeros({8}), -1.0f, false}, w, {}); },
                     {"rms_norm_linear", "eps"});
  test::expect_error(
      [&] { ops::rms_norm_linear({x, Tensor::zeros({8}), 1e-6f, false}, Tensor::zeros({3, 9}), {}); },
      {"rms_norm_linear", "weight", "[out, 8]"});
  test::expect_error(
      [&] { ops::rms_norm_linear({x, Tensor::zeros({8}), 1e-6f, false}, w, Tensor::zeros({4})); },
      {"rms_norm_linear", "bias"});
  test::expect_error(
      [&] {
        ops::rms_norm_gated_linear({x, Tensor::zeros({8}), 1e-6f, false}, w,
                                   Tensor::zeros({4, 8}).to(DType::F16), ops::Activation::SiLU);
      },
      {"rms_norm_gated_linear", "one shape"});
}

}  // namespace
}  // namespace vkf
