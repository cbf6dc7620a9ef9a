// Activations: every kind against the double reference (transformers' formulas) over a dense
// sweep including the far tails, gradients against the analytic reference (itself checked by
// finite differences), the gated forms (separate gate/up and fused gate_up in both orders), the
// HF name parser, determinism and errors on bad input.
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "ops/activation.h"
#include "ops/activation_ref.h"
#include "test_util.h"
#include "vk/error.h"

namespace vkf {
namespace {

using ops::Activation;
using test::Rng;

constexpr Activation kAll[] = {Activation::SiLU, Activation::GELU, Activation::GELUTanh,
                               Activation::ReLU, Activation::QuickGELU};

// fp32 evaluation of these formulas: a few ulp relative, plus an absolute floor for the tails
// where the value underflows towards 0.
constexpr double kAtol = 1e-7, kRtol = 1e-6;

// Dense values over [-12, 12] plus zero, tiny and huge magnitudes.
std::vector<double> sweep() {
  std::vector<double> x;
  for (int i = -12000; i <= 12000; i += 3) x.push_back(i * 1e-3 + 1e-4);
  for (double v : {0.0, -0.0, 1e-30, -1e-30, 1e-6, -1e-6, 30.0, -30.0, 80.0, -80.0, 1e4, -1e4})
    x.push_back(v);
  return test::as_f32(x);
}

TEST(Activation, ForwardMatchesReference) {
  const auto x = sweep();
  const Tensor tx = test::to_gpu(x, {static_cast<int64_t>(x.size())});
  for (Activation kind : kAll)
    test::expect_close(ops::activation(tx, kind), ref::activation(kind, x), kAtol, kRtol,
                       ops::activation_name(kind));
  // The named entry points are the same functions.
  test::expect_bitwise_equal(ops::silu(tx), ops::activation(tx, Activation::SiLU), "silu");
  test::expect_bitwise_equal(ops::gelu(tx), ops::activation(tx, Activation::GELU), "gelu");
  test::expect_bitwise_equal(ops::gelu_tanh(tx), ops::activation(tx, Activation::GELUTanh),
                             "gelu_tanh");
  test::expect_bitwise_equal(ops::relu(tx), ops::activation(tx, Activation::ReLU), "relu");
  test::expect_bitwise_equal(ops::quick_gelu(tx), ops::activation(tx, Activation::QuickGELU),
                             "quick_gelu");
}

TEST(Activation, OddShapesAndViews) {
  Rng rng(21);
  for (const Shape& s : {Shape{1}, Shape{7}, Shape{13, 37}, Shape{3, 1, 61}, Shape{}}) {
    const auto x = test::as_f32(rng.normal(static_cast<size_t>(shape_numel(s)), 3.0));
    for (Activation kind : kAll) {
      const Tensor y = ops::activation(test::to_gpu(x, s), kind);
      EXPECT_EQ(y.shape(), s);
      test::expect_close(y, ref::activation(kind, x), kAtol, kRtol,
                         std::string(ops::activation_name(kind)) + " " + shape_str(s));
    }
  }
  // A transposed view is read through a contiguous copy.
  const auto base = test::as_f32(rng.normal(13 * 37, 2.0));
  std::vector<double> t(base.size());
  for (int i = 0; i < 13; ++i)
    for (int j = 0; j < 37; ++j) t[j * 13 + i] = base[i * 37 + j];
  test::expect_close(ops::gelu(test::to_gpu(base, {13, 37}).transpose(0, 1)),
                     ref::activation(Activation::GELU, t), kAtol, kRtol, "gelu of a view");
}

TEST(Activation, GradientsMatchReferenceAndFiniteDifferences) {
  const auto x = sweep();
  const int64_t n = static_cast<int64_t>(x.size());
  Rng rng(22);
  const auto dy = test::as_f32(rng.uniform(x.size(), -1, 1));
  for (Activation kind : kAll) {
    const std::string name = ops::activation_name(kind);
    const auto g =
        test::gpu_grads([kind](std::vector<Tensor>& in) { return ops::activation(in[0], kind); },
                        {test::to_gpu(x, {n})}, test::to_gpu(dy, {n}));
    test::expect_close(g[0], ref::activation_backward(kind, x, dy), kAtol, 2e-6, name + " grad");
    // The analytic reference against finite differences, away from ReLU's kink at 0.
    const std::vector<double> small = {-4.1, -1.3, -0.4, 0.2, 0.9, 2.7, 5.3};
    const auto small_dy = test::as_f32(rng.uniform(small.size(), -1, 1));
    test::expect_close(
        ref::activation_backward(kind, small, small_dy),
        test::numeric_grad(
            [kind](const std::vector<double>& v) { return ref::activation(kind, v); }, small,
            small_dy),
        1e-8, 1e-7, name + " reference grad");
  }
}

TEST(Activation, GatedForwardAndBackward) {
  Rng rng(23);
  // Rows of 8 and 64 take the kernels' four-element builds (16-byte accesses), the others the
  // one-element ones.
  for (const Shape& s : {Shape{1}, Shape{7, 13}, Shape{3, 5, 61}, Shape{5, 8}, Shape{3, 64}}) {
    const size_t n = static_cast<size_t>(shape_numel(s));
    const auto gate = test::as_f32(rng.normal(n, 2.5)), up = test::as_f32(rng.normal(n, 1.0));
    const auto dy = test::as_f32(rng.uniform(n, -1, 1));
    for (Activation kind : kAll) {
      const std::string what = std::string(ops::activation_name(kind)) + " " + shape_str(s);
      test::expect_close(ops::gated_act(test::to_gpu(gate, s), test::to_gpu(up, s), kind),
                         ref::gated(kind, gate, up), kAtol, kRtol, "gated " + what);
      std::vector<double> dg, du;
      ref::gated_backward(kind, gate, up, dy, dg, du);
      const auto g = test::gpu_grads(
          [kind](std::vector<Tensor>& in) { return ops::gated_act(in[0], in[1], kind); },
          {test::to_gpu(gate, s), test::to_gpu(up, s)}, test::to_gpu(dy, s));
      test::expect_close(g[0], dg, kAtol, 2e-6, "gated d_gate " + what);
      test::expect_close(g[1], du, kAtol, kRtol, "gated d_up " + what);
    }
  }
  // The reference gated backward against finite differences.
  const std::vector<double> gate = {-2.2, -0.7, 0.3, 1.9}, up = {0.5, -1.5, 2.0, 0.25};
  const std::vector<double> dy = {1.0, -0.5, 0.75, 2.0};
  for (Activation kind : kAll) {
    std::vector<double> dg, du;
    ref::gated_backward(kind, gate, up, dy, dg, du);
    const auto fg = [&](const std::vector<double>& g) { return ref::gated(kind, g, up); };
    const auto fu = [&](const std::vector<double>& u) { return ref::gated(kind, gate, u); };
    test::expect_close(dg, test::numeric_grad(fg, gate, dy), 1e-8, 1e-7, "reference d_gate");
    test::expect_close(du, test::numeric_grad(fu, up, dy), 1e-8, 1e-7, "reference d_up");
  }
}

TEST(Activation, FusedGateUpBothOrders) {
  Rng rng(24);
  // Halves of 16 (rows of 32) take the four-element builds.
  for (const Shape& s : {Shape{1, 2}, Shape{7, 26}, Shape{2, 3, 122}, Shape{3, 32}}) {
    const int64_t inner = s.back() / 2;
    const size_t n = static_cast<size_t>(shape_numel(s));
    const auto gu = test::as_f32(rng.normal(n, 2.0));
    Shape so = s;
    so.back() = inner;
    const auto dy = test::as_f32(rng.uniform(n / 2, -1, 1));
    std::vector<double> first, second;
    ref::split_halves(gu, inner, first, second);
    for (bool gate_first : {true, false}) {
      const auto& gate = gate_first ? first : second;
      const auto& up = gate_first ? second : first;
      for (Activation kind : {Activation::SiLU, Activation::GELU, Activation::GELUTanh}) {
        const std::string what = std::string(ops::activation_name(kind)) + " " + shape_str(s) +
                                 (gate_first ? " gate first" : " up first");
        const Tensor y = ops::gated_act_fused(test::to_gpu(gu, s), kind, gate_first);
        EXPECT_EQ(y.shape(), so);
        test::expect_close(y, ref::gated(kind, gate, up), kAtol, kRtol, "fused " + what);
        std::vector<double> dg, du;
        ref::gated_backward(kind, gate, up, dy, dg, du);
        const auto want =
            gate_first ? ref::join_halves(dg, du, inner) : ref::join_halves(du, dg, inner);
        const auto g = test::gpu_grads(
            [kind, gate_first](std::vector<Tensor>& in) {
              return ops::gated_act_fused(in[0], kind, gate_first);
            },
            {test::to_gpu(gu, s)}, test::to_gpu(dy, so));
        test::expect_close(g[0], want, kAtol, 2e-6, "fused grad " + what);
      }
    }
  }
}

TEST(Activation, ParsesHfNames) {
  const std::pair<const char*, Activation> names[] = {{"silu", Activation::SiLU},
                                                      {"swish", Activation::SiLU},
                                                      {"gelu", Activation::GELU},
                                                      {"gelu_python", Activation::GELU},
                                                      {"gelu_pytorch_tanh", Activation::GELUTanh},
                                                      {"gelu_new", Activation::GELUTanh},
                                                      {"gelu_fast", Activation::GELUTanh},
                                                      {"gelu_accurate", Activation::GELUTanh},
                                                      {"gelu_python_tanh", Activation::GELUTanh},
                                                      {"relu", Activation::ReLU},
                                                      {"quick_gelu", Activation::QuickGELU}};
  for (const auto& [name, kind] : names) EXPECT_EQ(ops::parse_activation(name), kind) << name;
  for (Activation kind : kAll) EXPECT_EQ(ops::parse_activation(ops::activation_name(kind)), kind);
  for (const char* bad : {"", "SiLU", "gelu_10", "tanh", "mish", "relu2"}) {
    test::expect_error([&] { ops::parse_activation(bad); }, {"gelu_pytorch_tanh", "quick_gelu"});
  }
}

TEST(Activation, Deterministic) {
  Rng rng(25);
  const Tensor x = test::to_gpu(test::as_f32(rng.normal(100003, 3.0)), {100003});
  for (Activation kind : kAll)
    test::expect_bitwise_equal(ops::activation(x, kind), ops::activation(x, kind),
                               ops::activation_name(kind));
  const Tensor gu = test::to_gpu(test::as_f32(rng.normal(3 * 2 * 6007, 2.0)), {3, 2 * 6007});
  test::expect_bitwise_equal(ops::gated_act_fused(gu, Activation::SiLU),
                             ops::gated_act_fused(gu, Activation::SiLU), "fused swiglu");
}

TEST(Activation, BadInputThrows) {
  const Tensor x = Tensor::zeros({3, 4});
  EXPECT_THROW(ops::silu(Tensor()), Error);
  EXPECT_THROW(ops::gelu(Tensor::zeros({3, 4}, DType::I32)), Error);
  EXPECT_THROW(ops::relu(Tensor::zeros({0})), Error);
  EXPECT_THROW(ops::activation(x, static_cast<Activation>(17)), Error);
  EXPECT_THROW(ops::gated_act(x, Tensor::zeros({4, 3}), Activation::SiLU), Error);
  EXPECT_THROW(ops::gated_act(x, Tensor(), Activation::SiLU), Error);
  EXPECT_THROW(ops::gated_act(x, Tensor::zeros({3, 4}, DType::F16), Activation::SiLU), Error);
  EXPECT_THROW(ops::gated_act_fused(Tensor::zeros({3, 5}), Activation::SiLU), Error);
  EXPECT_THROW(ops::gated_act_fused(Tensor::zeros({}), Activation::SiLU), Error);
  try {
    ops::gated_act_fused(Tensor::zeros({3, 5}), Activation::GELU);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[3, 5]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vkf
