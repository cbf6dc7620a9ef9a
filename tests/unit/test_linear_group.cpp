// ops::linear_concat and ops::linear_split (several linear layers on one input as one product)
// against the double reference of the separate layers: forward, the gradients of x, of every
// weight and bias (one output without a gradient: zeros there), gradients accumulating into
// existing ones, ragged sizes over a batch of rows, and F16 operand rounding. In fp32 without
// split-K or stream-K the forward must give the bits of the separate products (each output the
// same sum in the same order), and bad arguments get errors that say what to fix.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/dtype.h"
#include "core/launch.h"
#include "models/decoder.h"
#include "ops/linear_group.h"
#include "ops/matmul.h"
#include "ops/matmul_coopmat.h"
#include "ops/matmul_kernels.h"
#include "ops/matmul_ref.h"
#include "ops/matmul_tiling.h"
#include "test_models.h"
#include "test_util.h"

namespace vkf {
namespace {

using test::Rng;

constexpr int64_t kB = 2, kT = 19, kRows = kB * kT, kIn = 45;
const std::vector<int64_t> kOuts = {23, 9, 9};  // q, k and v of a GQA layer, say

struct Restore {
  Restore() {
    ops::detail::set_split_k(-1);
    ops::detail::set_stream_k(-1);
  }
  ~Restore() {
    ops::detail::set_split_k(0);
    ops::detail::set_stream_k(0);
    ops::detail::set_coopmat_choice(coopmat);
    set_matmul_precision(precision);
  }
  std::string coopmat = ops::detail::coopmat_choice();
  MatmulPrecision precision = matmul_precision();
};

// Random inputs of the group, as doubles (f32-exact) and on the GPU.
struct Group {
  std::vector<double> x;
  std::vector<std::vector<double>> w, b;
  Tensor tx;
  std::vector<Tensor> tw, tb;
};
Group make_group(Rng& rng, bool with_bias) {
  Group g;
  g.x = test::as_f32(rng.uniform(kRows * kIn));
  g.tx = test::to_gpu(g.x, {kB, kT, kIn});
  for (int64_t out : kOuts) {
    g.w.push_back(test::as_f32(rng.uniform(out * kIn)));
    g.tw.push_back(test::to_gpu(g.w.back(), {out, kIn}));
    if (with_bias) {
      g.b.push_back(test::as_f32(rng.uniform(out)));
      g.tb.push_back(test::to_gpu(g.b.back(), {out}));
    }
  }
  return g;
}

// f16-rounded copies, as F16 precision multiplies them.
std::vector<double> rounded(std::vector<double> v) {
  for (double& e : v) e = f16_bits_to_f32(f32_to_f16_bits(static_cast<float>(e)));
  return v;
}

// Columns [at, at + n) of a [rows, width] matrix.
std::vector<double> columns(const std::vector<double>& m, int64_t width, int64_t at, int64_t n) {
  std::vector<double> out;
  for (int64_t r = 0; r < static_cast<int64_t>(m.size()) / width; ++r)
    for (int64_t c = 0; c < n; ++c) out.push_back(m[static_cast<size_t>(r * width + at + c)]);
  return out;
}

struct Want {
  std::vector<std::vector<double>> y, dw, db;
  std::vector<double> dx;
};
// The separate layers' outputs and gradients for the output gradients dy[i] (empty: none).
Want reference(const Group& g, const std::vector<std::vector<double>>& dy, bool f16) {
  Want w;
  w.dx.assign(static_cast<size_t>(kRows * kIn), 0.0);
  const auto x = f16 ? rounded(g.x) : g.x;
  for (size_t i = 0; i < kOuts.size(); ++i) {
    const auto wi = f16 ? rounded(g.w[i]) : g.w[i];
    const std::vector<double> bias = g.b.empty() ? std::vector<double>() : g.b[i];
    w.y.push_back(ref::linear(x, wi, bias, kRows, kIn, kOuts[i]));
    std::vector<double> dyi = dy[i].empty() ? std::vector<double>(kRows * kOuts[i], 0.0) : dy[i];
    if (f16) dyi = rounded(dyi);
    std::vector<double> dx, dwi, dbi;
    ref::linear_backward(x, wi, dyi, kRows, kIn, kOuts[i], !g.b.empty(), dx, dwi, dbi);
    if (!g.b.empty() && f16) {
      // The bias gradient sums the unrounded output gradient (as ops::linear's does).
      dbi.assign(static_cast<size_t>(kOuts[i]), 0.0);
      for (int64_t r = 0; r < kRows && !dy[i].empty(); ++r)
        for (int64_t c = 0; c < kOuts[i]; ++c)
          dbi[static_cast<size_t>(c)] += dy[i][static_cast<size_t>(r * kOuts[i] + c)];
    }
    for (size_t e = 0; e < dx.size(); ++e) w.dx[e] += dx[e];
    w.dw.push_back(dwi);
    w.db.push_back(dbi);
  }
  return w;
}

// Runs linear_split (split) or linear_concat, back-propagates dy and checks everything.
void check(bool split, bool with_bias, bool f16, const std::string& what) {
  Rng rng(split * 2 + with_bias + 4 * f16);
  Restore restore;
  if (f16) {
    set_matmul_precision(MatmulPrecision::F16);
    ops::detail::set_coopmat_choice("off");  // the portable kernels' rounding, on every device
  }
  Group g = make_group(rng, with_bias);
  std::vector<std::vector<double>> dy;
  for (size_t i = 0; i < kOuts.size(); ++i)
    dy.push_back(split && i == 1 ? std::vector<double>()
                                 : test::as_f32(rng.uniform(kRows * kOuts[i])));
  const Want want = reference(g, dy, f16);
  const double tol = 2e-6 * kIn;

  autograd::Tape tape;
  std::vector<Tensor> outs;
  {
    autograd::TapeScope scope(tape);
    g.tx.set_requires_grad(true);
    for (auto& t : g.tw) t.set_requires_grad(true);
    for (auto& t : g.tb) t.set_requires_grad(true);
    if (split) {
      outs = ops::linear_split(g.tx, g.tw, g.tb);
    } else {
      outs.push_back(ops::linear_concat(g.tx, g.tw, g.tb));
    }
  }
  std::vector<Tensor> roots, seeds;
  if (split) {
    ASSERT_EQ(outs.size(), kOuts.size());
    for (size_t i = 0; i < kOuts.size(); ++i) {
      EXPECT_EQ(outs[i].shape(), (Shape{kB, kT, kOuts[i]})) << what;
      EXPECT_TRUE(outs[i].is_contiguous()) << what;
      test::expect_close(outs[i], want.y[i], tol, 1e-5, what + ": y" + std::to_string(i));
      if (dy[i].empty()) continue;
      roots.push_back(outs[i]);
      seeds.push_back(test::to_gpu(dy[i], outs[i].shape()));
    }
  } else {
    const int64_t width = outs[0].dim(-1);
    EXPECT_EQ(width, 41) << what;
    const auto y = outs[0].to_double();
    std::vector<double> seed(static_cast<size_t>(kRows * width));
    int64_t at = 0;
    for (size_t i = 0; i < kOuts.size(); ++i) {
      test::expect_close(columns(y, width, at, kOuts[i]), want.y[i], tol, 1e-5,
                         what + ": y" + std::to_string(i));
      for (int64_t r = 0; r < kRows; ++r)
        for (int64_t c = 0; c < kOuts[i]; ++c)
          seed[static_cast<size_t>(r * width + at + c)] =
              dy[i][static_cast<size_t>(r * kOuts[i] + c)];
      at += kOuts[i];
    }
    roots.push_back(outs[0]);
    seeds.push_back(test::to_gpu(seed, outs[0].shape()));
  }
  tape.backward(roots, seeds);
  test::expect_close(g.tx.grad(), want.dx, tol, 1e-5, what + ": dx");
  for (size_t i = 0; i < kOuts.size(); ++i) {
    test::expect_close(g.tw[i].grad(), want.dw[i], 2e-6 * kRows, 1e-5,
                       what + ": dW" + std::to_string(i));
    if (with_bias)
      test::expect_close(g.tb[i].grad(), want.db[i], 2e-6 * kRows, 1e-5,
                         what + ": db" + std::to_string(i));
  }
  // A second backward of the same graph adds to the gradients (as torch accumulates).
  autograd::Tape again;
  {
    autograd::TapeScope scope(again);
    outs = split ? ops::linear_split(g.tx, g.tw, g.tb)
                 : std::vector<Tensor>{ops::linear_concat(g.tx, g.tw, g.tb)};
  }
  std::vector<Tensor> roots2;
  for (size_t i = 0; i < outs.size(); ++i)
    if (!split || !dy[i].empty()) roots2.push_back(outs[i]);
  again.backward(roots2, seeds);
  std::vector<double> twice = want.dw[0];
  for (double& e : twice) e *= 2;
  test::expect_close(g.tw[0].grad(), twice, 4e-6 * kRows, 1e-5, what + ": dW0 accumulated");
  g.tx.set_requires_grad(false);
  for (auto& t : g.tw) t.set_requires_grad(false);
  for (auto& t : g.tb) t.set_requires_grad(false);
}

TEST(LinearGroup, ConcatMatchesSeparateLayers) {
  check(false, false, false, "concat");
  check(false, true, false, "concat with biases");
}

TEST(LinearGroup, SplitMatchesSeparateLayersOneOutputWithoutGradient) {
  check(true, false, false, "split");
  check(true, true, false, "split with biases");
}

TEST(LinearGroup, F16Rounding) {
  check(true, true, true, "split, f16");
  check(false, false, true, "concat, f16");
}

// Each output is the same sum in the same order as the separate layer's.
TEST(LinearGroup, SameBitsAsSeparateLayersForward) {
  Rng rng(9);
  Restore restore;
  const Group g = make_group(rng, true);
  const std::vector<Tensor> split = ops::linear_split(g.tx, g.tw, g.tb);
  for (size_t i = 0; i < kOuts.size(); ++i)
    test::expect_bitwise_equal(split[i], ops::linear(g.tx, g.tw[i], g.tb[i]),
                               "output " + std::to_string(i));
}

TEST(LinearGroup, BadArguments) {
  Rng rng(10);
  const Group g = make_group(rng, true);
  test::expect_error([&] { ops::linear_concat(g.tx, {}); }, {"linear_concat", "no weights"});
  test::expect_error([&] { ops::linear_split(g.tx, g.tw, {g.tb[0]}); },
                     {"linear_split", "1 biases for 3 weights"});
  const Tensor wide = test::to_gpu(std::vector<double>(9 * 46, 0.0), {9, 46});
  test::expect_error(
      [&] {
        ops::linear_concat(g.tx, {g.tw[0], wide});
      },
      {"weight 1", "[9, 46]", "[out, 45]"});
  test::expect_error(
      [&] {
        ops::linear_split(g.tx, {g.tw[0], g.tw[1]}, {g.tb[0], g.tb[2].slice(0, 0, 5)});
      },
      {"bias 1", "9 outputs"});
}

// A decoder's mixed-precision step (f16 operand copies: the cooperative-matrix emulation stands in
// for tensor cores where the device has none) with its q/k/v and gate/up projections grouped
// gives the loss and gradients of the separate projections, within half-precision tolerance (the
// input gradients sum their terms in another order, which can move an f16 rounding).
TEST(LinearGroup, DecoderStepMatchesSeparateProjections) {
  Restore restore;
  struct Guard {
    ~Guard() {
      ops::detail::set_coopmat_emulation(false);
      models::DecoderModel::set_projection_grouping(true);
    }
  } guard;
  set_matmul_precision(MatmulPrecision::F16);
  if (!ops::detail::f16_operands_active()) ops::detail::set_coopmat_emulation(true);
  ASSERT_TRUE(ops::detail::f16_operands_active());
  const nlohmann::json c = {{"model_type", "llama"},    {"vocab_size", 50},
                            {"hidden_size", 32},        {"intermediate_size", 40},
                            {"num_hidden_layers", 2},   {"num_attention_heads", 4},
                            {"num_key_value_heads", 2}, {"max_position_embeddings", 64}};
  Rng rng(11);
  const std::vector<int32_t> ids = rng.ints(2 * 12, 0, 49);
  auto step = [&](bool grouped) {
    models::DecoderModel::set_projection_grouping(grouped);
    EXPECT_EQ(models::DecoderModel::groups_projections_of(40), grouped);
    models::DecoderModel model = test::random_decoder(c, 5, 0.2);
    model.set_requires_grad(true);
    std::vector<std::vector<double>> out;
    for (const Tensor& t : test::loss_and_gradients(model, ids, 2, 12))
      out.push_back(t.to_double());
    return out;
  };
  const auto separate = step(false), grouped = step(true);
  ASSERT_EQ(separate.size(), grouped.size());
  EXPECT_NEAR(grouped[0][0], separate[0][0], 1e-3 * std::abs(separate[0][0]));
  for (size_t i = 1; i < separate.size(); ++i) {
    double scale = 0;
    for (double v : separate[i]) scale = std::max(scale, std::abs(v));
    test::expect_close(grouped[i], separate[i], 1e-2 * scale, 0.0, "gradient " + std::to_string(i));
  }
}

}  // namespace
}  // namespace vkf
