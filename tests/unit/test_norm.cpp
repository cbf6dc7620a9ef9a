// RMSNorm / LayerNorm tests: forward and gradients against the double reference on odd shapes
// (rows 1 .. 4097, row lengths 1 .. 16411, both the one-block and the multi-block weight-gradient
// paths), the reference backward against finite differences, gradient accumulation, strided
// inputs, bitwise determinism and input validation.
#include <cmath>
#include <string>

#include "ops/norm.h"
#include "ops/norm_ref.h"
#include "test_util.h"
#include "vk/error.h"

namespace vkf {
namespace {

using test::Rng;

enum class Kind { Rms, RmsOnePlus, RmsNoWeight, Layer, LayerNoBias, LayerNoAffine };

struct KindInfo {
  Kind kind;
  const char* name;
  bool layer, one_plus, weight, bias;
};

constexpr KindInfo kKinds[] = {
    {Kind::Rms, "rms", false, false, true, false},
    {Kind::RmsOnePlus, "rms(1+w)", false, true, true, false},
    {Kind::RmsNoWeight, "rms(no weight)", false, false, false, false},
    {Kind::Layer, "layer", true, false, true, true},
    {Kind::LayerNoBias, "layer(no bias)", true, false, true, false},
    {Kind::LayerNoAffine, "layer(no weight, no bias)", true, false, false, false},
};

struct Inputs {
  std::vector<double> x, w, b;
};

// Inputs with a per-row offset and scale, so LayerNorm's centring and both statistics matter.
Inputs make_inputs(Rng& rng, const KindInfo& k, int64_t rows, int64_t h) {
  Inputs in;
  in.x = rng.normal(static_cast<size_t>(rows * h));
  const auto shift = rng.uniform(static_cast<size_t>(rows), -2, 2);
  const auto scale = rng.uniform(static_cast<size_t>(rows), 0.2, 3);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < h; ++j) in.x[i * h + j] = in.x[i * h + j] * scale[i] + shift[i];
  in.x = test::as_f32(in.x);
  if (k.weight) in.w = test::as_f32(rng.uniform(static_cast<size_t>(h), -1.5, 1.5));
  if (k.bias) in.b = test::as_f32(rng.uniform(static_cast<size_t>(h), -1, 1));
  return in;
}

Tensor gpu_or_none(const std::vector<double>& v, int64_t h) {
  return v.empty() ? Tensor() : test::to_gpu(v, {h});
}

Tensor run_gpu(const KindInfo& k, const Tensor& x, const Tensor& w, const Tensor& b, float eps) {
  return k.layer ? ops::layer_norm(x, w, b, eps) : ops::rms_norm(x, w, eps, k.one_plus);
}

std::vector<double> run_ref(const KindInfo& k, const Inputs& in, int64_t rows, int64_t h,
                            double eps) {
  return k.layer ? ref::layer_norm(in.x, in.w, in.b, rows, h, eps)
                 : ref::rms_norm(in.x, in.w, rows, h, eps, k.one_plus);
}

ref::NormGrads run_ref_backward(const KindInfo& k, const Inputs& in, const std::vector<double>& dy,
                                int64_t rows, int64_t h, double eps) {
  return k.layer ? ref::layer_norm_backward(in.x, in.w, in.b, dy, rows, h, eps)
                 : ref::rms_norm_backward(in.x, in.w, dy, rows, h, eps, k.one_plus);
}

std::string label(const KindInfo& k, int64_t rows, int64_t h) {
  return std::string(k.name) + " rows=" + std::to_string(rows) + " h=" + std::to_string(h);
}

struct Shape2 {
  int64_t rows, h;
};

TEST(Norm, ForwardMatchesReference) {
  // Rows of one element, primes, a row past 16384, and sizes that are no multiple of any tile.
  const Shape2 shapes[] = {{1, 1},     {7, 5},     {33, 64},   {61, 1},   {1000, 576},
                           {4097, 64}, {13, 3000}, {2, 16411}, {37, 257}, {5, 2}};
  Rng rng(11);
  for (const auto& k : kKinds) {
    for (const auto& s : shapes) {
      const double eps = k.layer ? 1e-5 : 1e-6;
      const Inputs in = make_inputs(rng, k, s.rows, s.h);
      Tensor x = test::to_gpu(in.x, {s.rows, s.h});
      Tensor y =
          run_gpu(k, x, gpu_or_none(in.w, s.h), gpu_or_none(in.b, s.h), static_cast<float>(eps));
      ASSERT_EQ(y.shape(), x.shape());
      test::expect_close(y, run_ref(k, in, s.rows, s.h, eps), 2e-6, 2e-6, label(k, s.rows, s.h));
    }
  }
}

TEST(Norm, HigherRankInputsNormalizeTheLastDimension) {
  // Qwen3-style per-head q norm: x [B, T, heads, D], weight [D].
  Rng rng(12);
  const KindInfo& k = kKinds[0];
  const Inputs in = make_inputs(rng, k, 2 * 7 * 3, 10);
  Tensor y = ops::rms_norm(test::to_gpu(in.x, {2, 7, 3, 10}), test::to_gpu(in.w, {10}), 1e-6f);
  EXPECT_EQ(y.shape(), (Shape{2, 7, 3, 10}));
  test::expect_close(y, run_ref(k, in, 42, 10, 1e-6), 2e-6, 2e-6, "rank-4 rms");
}

TEST(Norm, BackwardMatchesReference) {
  // Up to 32 rows: one block of rows, whose sums go straight into the weight gradient; from 33
  // rows on, several blocks reduced in a second pass. Rows from 1 to 16411 elements.
  const Shape2 shapes[] = {{1, 1},     {7, 5},    {33, 64},  {1000, 37},
                           {4097, 64}, {3, 3000}, {61, 300}, {2, 16411}};
  Rng rng(21);
  for (const auto& k : kKinds) {
    for (const auto& s : shapes) {
      const double eps = 1e-5;
      const Inputs in = make_inputs(rng, k, s.rows, s.h);
      const auto dy = test::as_f32(rng.normal(static_cast<size_t>(s.rows * s.h)));
      std::vector<Tensor> inputs = {test::to_gpu(in.x, {s.rows, s.h})};
      if (k.weight) inputs.push_back(test::to_gpu(in.w, {s.h}));
      if (k.bias) inputs.push_back(test::to_gpu(in.b, {s.h}));
      const auto grads = test::gpu_grads(
          [&](std::vector<Tensor>& t) {
            const Tensor w = k.weight ? t[1] : Tensor();
            const Tensor b = k.bias ? t[2] : Tensor();
            return run_gpu(k, t[0], w, b, static_cast<float>(eps));
          },
          inputs, test::to_gpu(dy, {s.rows, s.h}));
      const auto want = run_ref_backward(k, in, dy, s.rows, s.h, eps);
      const std::string what = label(k, s.rows, s.h);
      test::expect_close(grads[0], want.dx, 1e-5, 1e-5, what + " dx");
      // Weight/bias gradients are sums over every row: the tolerance grows with the row count.
      const double atol = 2e-6 * std::sqrt(static_cast<double>(s.rows)) * 4;
      if (k.weight) test::expect_close(grads[1], want.dw, atol, 1e-5, what + " dw");
      if (k.bias) test::expect_close(grads[2], want.db, atol, 1e-5, what + " db");
    }
  }
}

TEST(Norm, ReferenceBackwardMatchesFiniteDifferences) {
  Rng rng(31);
  const int64_t rows = 3, h = 5;
  const double eps = 1e-3;  // large enough to matter in the derivative
  for (const auto& k : kKinds) {
    const Inputs in = make_inputs(rng, k, rows, h);
    const auto dy = rng.normal(static_cast<size_t>(rows * h));
    const auto g = run_ref_backward(k, in, dy, rows, h, eps);
    const std::string what = std::string(k.name) + " reference";
    test::expect_close(test::numeric_grad(
                           [&](const std::vector<double>& v) {
                             Inputs p = in;
                             p.x = v;
                             return run_ref(k, p, rows, h, eps);
                           },
                           in.x, dy),
                       g.dx, 1e-7, 1e-6, what + " dx");
    if (k.weight)
      test::expect_close(test::numeric_grad(
                             [&](const std::vector<double>& v) {
                               Inputs p = in;
                               p.w = v;
                               return run_ref(k, p, rows, h, eps);
                             },
                             in.w, dy),
                         g.dw, 1e-7, 1e-6, what + " dw");
    if (k.bias)
      test::expect_close(test::numeric_grad(
                             [&](const std::vector<double>& v) {
                               Inputs p = in;
                               p.b = v;
                               return run_ref(k, p, rows, h, eps);
                             },
                             in.b, dy),
                         g.db, 1e-7, 1e-6, what + " db");
  }
}

TEST(Norm, GradientsAccumulate) {
  // y = rms(rms(x, w), w): w is used twice in one tape (its second gradient adds into the first),
  // and a second backward adds into the leaf gradients again (as torch does across calls).
  Rng rng(41);
  for (int64_t rows : {5, 1000}) {  // one block / many blocks of rows
    const int64_t h = 24;
    const double eps = 1e-6;
    const auto x = test::as_f32(rng.normal(static_cast<size_t>(rows * h)));
    const auto w = test::as_f32(rng.uniform(static_cast<size_t>(h), 0.5, 1.5));
    const auto dy = test::as_f32(rng.normal(static_cast<size_t>(rows * h)));
    const auto y1 = ref::rms_norm(x, w, rows, h, eps, false);
    const auto g2 = ref::rms_norm_backward(y1, w, dy, rows, h, eps, false);
    const auto g1 = ref::rms_norm_backward(x, w, g2.dx, rows, h, eps, false);
    std::vector<double> dw(h);
    for (int64_t j = 0; j < h; ++j) dw[j] = g1.dw[j] + g2.dw[j];

    Tensor tx = test::to_gpu(x, {rows, h}), tw = test::to_gpu(w, {h});
    tx.set_requires_grad(true);
    tw.set_requires_grad(true);
    for (int call = 1; call <= 2; ++call) {
      autograd::Tape tape;
      Tensor out;
      {
        autograd::TapeScope scope(tape);
        out = ops::rms_norm(ops::rms_norm(tx, tw, static_cast<float>(eps)), tw,
                            static_cast<float>(eps));
      }
      tape.backward(out, test::to_gpu(dy, {rows, h}));
      std::vector<double> want_dx = g1.dx, want_dw = dw;
      for (auto& v : want_dx) v *= call;
      for (auto& v : want_dw) v *= call;
      const std::string what = "rows=" + std::to_string(rows) + " call " + std::to_string(call);
      test::expect_close(tx.grad(), want_dx, 2e-5, 2e-5, what + " dx");
      test::expect_close(tw.grad(), want_dw, 2e-4, 2e-5, what + " dw");
    }
  }
}

TEST(Norm, WeightAndBiasGradientsAccumulateIndependently) {
  // The bias already holds a gradient (so its new one is added) while the weight has none (so
  // its new one is written), on both the one-block and the multi-block paths.
  Rng rng(45);
  const KindInfo& k = kKinds[3];
  for (int64_t rows : {7, 100}) {
    const int64_t h = 19;
    const Inputs in = make_inputs(rng, k, rows, h);
    const auto dy = test::as_f32(rng.normal(static_cast<size_t>(rows * h)));
    const auto prior = test::as_f32(rng.normal(static_cast<size_t>(h)));
    const auto want = ref::layer_norm_backward(in.x, in.w, in.b, dy, rows, h, 1e-5);
    Tensor x = test::to_gpu(in.x, {rows, h}), w = test::to_gpu(in.w, {h});
    Tensor b = test::to_gpu(in.b, {h});
    w.set_requires_grad(true);
    b.set_requires_grad(true);
    b.set_grad(test::to_gpu(prior, {h}));
    autograd::Tape tape;
    Tensor y;
    {
      autograd::TapeScope scope(tape);
      y = ops::layer_norm(x, w, b, 1e-5f);
    }
    tape.backward(y, test::to_gpu(dy, {rows, h}));
    std::vector<double> want_db = want.db;
    for (int64_t j = 0; j < h; ++j) want_db[j] += prior[j];
    const std::string what = "rows=" + std::to_string(rows);
    test::expect_close(w.grad(), want.dw, 1e-5, 1e-5, what + " dw");
    test::expect_close(b.grad(), want_db, 1e-5, 1e-5, what + " db");
    EXPECT_FALSE(x.grad().defined());
  }
}

TEST(Norm, StridedInputIsNormalizedAndGetsGradients) {
  // x is a transposed view [B, T, heads, D] of [B, heads, T, D]: made contiguous inside, and the
  // gradient flows back through that copy to the base tensor.
  Rng rng(51);
  const int64_t B = 2, T = 7, NH = 3, D = 13;
  const auto base = test::as_f32(rng.normal(static_cast<size_t>(B * NH * T * D)));
  const auto w = test::as_f32(rng.uniform(static_cast<size_t>(D), -1, 1));
  const auto b = test::as_f32(rng.uniform(static_cast<size_t>(D), -1, 1));
  // The same values in [B, T, heads, D] order, for the reference.
  std::vector<double> xt(base.size());
  for (int64_t bi = 0; bi < B; ++bi)
    for (int64_t hi = 0; hi < NH; ++hi)
      for (int64_t ti = 0; ti < T; ++ti)
        for (int64_t d = 0; d < D; ++d)
          xt[((bi * T + ti) * NH + hi) * D + d] = base[((bi * NH + hi) * T + ti) * D + d];
  const int64_t rows = B * T * NH;
  const auto dy = test::as_f32(rng.normal(static_cast<size_t>(rows * D)));
  const auto grads = test::gpu_grads(
      [&](std::vector<Tensor>& t) {
        Tensor view = t[0].transpose(1, 2);
        EXPECT_FALSE(view.is_contiguous());
        return ops::layer_norm(view, t[1], t[2], 1e-5f);
      },
      {test::to_gpu(base, {B, NH, T, D}), test::to_gpu(w, {D}), test::to_gpu(b, {D})},
      test::to_gpu(dy, {B, T, NH, D}));
  const auto want = ref::layer_norm_backward(xt, w, b, dy, rows, D, 1e-5);
  std::vector<double> want_dbase(base.size());
  for (int64_t bi = 0; bi < B; ++bi)
    for (int64_t hi = 0; hi < NH; ++hi)
      for (int64_t ti = 0; ti < T; ++ti)
        for (int64_t d = 0; d < D; ++d)
          want_dbase[((bi * NH + hi) * T + ti) * D + d] =
              want.dx[((bi * T + ti) * NH + hi) * D + d];
  test::expect_close(grads[0], want_dbase, 1e-5, 1e-5, "strided dx");
  test::expect_close(grads[1], want.dw, 1e-5, 1e-5, "strided dw");
  test::expect_close(grads[2], want.db, 1e-5, 1e-5, "strided db");
  Tensor y = ops::layer_norm(test::to_gpu(base, {B, NH, T, D}).transpose(1, 2),
                             test::to_gpu(w, {D}), test::to_gpu(b, {D}), 1e-5f);
  test::expect_close(y, ref::layer_norm(xt, w, b, rows, D, 1e-5), 2e-6, 2e-6, "strided forward");
}

TEST(Norm, Deterministic) {
  Rng rng(61);
  const int64_t rows = 3001, h = 333;
  for (const auto& k : {kKinds[1], kKinds[3]}) {
    const Inputs in = make_inputs(rng, k, rows, h);
    const auto dy = rng.normal(static_cast<size_t>(rows * h));
    std::vector<Tensor> outs, dxs, dws;
    for (int run = 0; run < 2; ++run) {
      Tensor x = test::to_gpu(in.x, {rows, h}), w = test::to_gpu(in.w, {h});
      Tensor b = k.bias ? test::to_gpu(in.b, {h}) : Tensor();
      x.set_requires_grad(true);
      w.set_requires_grad(true);
      autograd::Tape tape;
      Tensor y;
      {
        autograd::TapeScope scope(tape);
        y = run_gpu(k, x, w, b, 1e-5f);
      }
      outs.push_back(y);
      tape.backward(y, test::to_gpu(dy, {rows, h}));
      dxs.push_back(x.grad());
      dws.push_back(w.grad());
    }
    test::expect_bitwise_equal(outs[0], outs[1], std::string(k.name) + " forward");
    test::expect_bitwise_equal(dxs[0], dxs[1], std::string(k.name) + " dx");
    test::expect_bitwise_equal(dws[0], dws[1], std::string(k.name) + " dw");
  }
}

TEST(Norm, BadInputsAreRejected) {
  Tensor x = Tensor::zeros({4, 6});
  Tensor w = Tensor::zeros({6});
  std::string msg = test::error_message([&] { ops::rms_norm(x, Tensor::zeros({5}), 1e-6f); });
  EXPECT_NE(msg.find("rms_norm"), std::string::npos) << msg;
  EXPECT_NE(msg.find("weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[5]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4, 6]"), std::string::npos) << msg;
  msg = test::error_message([&] { ops::layer_norm(x, w, Tensor::zeros({6, 1}), 1e-5f); });
  EXPECT_NE(msg.find("layer_norm: bias"), std::string::npos) << msg;
  EXPECT_THROW(ops::rms_norm(Tensor::zeros({4, 6}, DType::I32), w, 1e-6f), Error);
  EXPECT_THROW(ops::rms_norm(x.to(DType::F16), w, 1e-6f), Error);
  EXPECT_THROW(ops::rms_norm(x, w.to(DType::BF16), 1e-6f), Error);
  EXPECT_THROW(ops::rms_norm(Tensor(), w, 1e-6f), Error);
  EXPECT_THROW(ops::rms_norm(Tensor::zeros({0, 6}), w, 1e-6f), Error);
  EXPECT_THROW(ops::layer_norm(Tensor::zeros({4, 0}), Tensor(), Tensor(), 1e-5f), Error);
  EXPECT_THROW(ops::rms_norm(x, w, -1.0f), Error);
  EXPECT_THROW(ops::rms_norm(x, w, NAN), Error);
  EXPECT_THROW(ops::layer_norm(x, Tensor::zeros({6, 1}), Tensor(), 1e-5f), Error);
}

}  // namespace
}  // namespace vkf
