// Mixed precision with dynamic loss scaling (train/grad_scaler.h, train/optimizer_step.h and the
// ops under them): the scaler's update rule as torch.amp.GradScaler's; the fused inf/nan check +
// unscaled norm against a double reference (inf, -inf, NaN, squares that overflow without any inf);
// unscale + clip against torch's two-multiply sequence; AdamW's gate (a skipped update leaves
// parameters and moments bitwise unchanged, and the step numbers uncounted); a skipped step in a
// training loop (no update, scale halved, learning-rate schedule held back as transformers' Trainer
// holds its scheduler, global step advancing), growth after the interval; loss scaling being exact
// (with fp32 products a scaled step is bitwise an unscaled one); the fp32 path being clipping +
// AdamW as before; and a mixed-precision step's gradients and updated parameters against an fp64
// reference at half-precision tolerance.
//
// Until matrix products honour MatmulPrecision::F16 (operands rounded to f16), "f16" runs compute
// like fp32, so the fp64 comparison holds trivially; it is written for the f16 products: its
// second case scales the loss by 2^-20, whose gradients f16 products would flush to zero without
// loss scaling, and only then does it check that the scaler rescues them.
#include <cmath>
#include <limits>
#include <map>

#include "core/autograd.h"
#include "core/launch.h"
#include "models/decoder.h"
#include "models/registry.h"
#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/loss.h"
#include "ops/matmul.h"
#include "ops/optim.h"
#include "ops/optim_ref.h"
#include "ops/reduce.h"
#include "ops/reduce_ref.h"
#include "test_models.h"
#include "test_util.h"
#include "train/grad_scaler.h"
#include "train/optimizer_step.h"
#include "train/trainer.h"
#include "vk/error.h"

namespace vkf {
namespace {

using test::Rng;
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<double> host(const Tensor& t) { return t.to_double(); }

// Sets the matrix-product precision for a test's scope.
struct Precision {
  MatmulPrecision before = matmul_precision();
  explicit Precision(MatmulPrecision p) { set_matmul_precision(p); }
  ~Precision() { set_matmul_precision(before); }
};

// ---------------------------------------------------------------------------------------------
// GradScaler

TEST(GradScaler, UpdatesAsTorchAmpGradScaler) {
  train::GradScaler s;  // torch's defaults
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.inv_scale(), 1.0f / 65536.0f);
  EXPECT_EQ(s.growth_tracker(), 0);
  s.update(true);  // overflow: backoff 0.5, tracker restarts
  EXPECT_EQ(s.scale(), 32768.0f);
  for (int i = 1; i < 2000; ++i) {
    s.update(false);
    ASSERT_EQ(s.growth_tracker(), i);
    ASSERT_EQ(s.scale(), 32768.0f);
  }
  s.update(false);  // the 2000th clean step in a row: growth 2.0
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.growth_tracker(), 0);
  // An overflow part-way resets the count.
  train::GradScaler t({1024.0, 2.0, 0.5, 3});
  t.update(false);
  t.update(false);
  t.update(true);
  EXPECT_EQ(t.scale(), 512.0f);
  t.update(false);
  t.update(false);
  EXPECT_EQ(t.scale(), 512.0f);
  t.update(false);
  EXPECT_EQ(t.scale(), 1024.0f);
  // Growth that would overflow f32 is not applied (torch's kernel keeps the finite scale).
  train::GradScaler big({std::ldexp(1.0, 127), 2.0, 0.5, 1});
  big.update(false);
  EXPECT_EQ(big.scale(), std::ldexp(1.0f, 127));
  EXPECT_EQ(big.growth_tracker(), 0);
  // A non-power-of-two scale: 1/S is the double reciprocal rounded to f32, as unscale_ forms it.
  train::GradScaler odd({3.0, 2.0, 0.5, 10});
  EXPECT_EQ(odd.inv_scale(), static_cast<float>(1.0 / 3.0));
}

TEST(GradScaler, StateRoundTripsAndBadConfigsFail) {
  train::GradScaler s({4096.0, 2.0, 0.5, 5});
  s.update(false);
  s.update(false);
  const train::GradScaler r = train::GradScaler::from_json(s.to_json(), "state.json");
  EXPECT_EQ(r.scale(), s.scale());
  EXPECT_EQ(r.growth_tracker(), 2);
  EXPECT_EQ(r.config().growth_interval, 5);
  test::expect_error([] { train::GradScaler({0.0, 2.0, 0.5, 10}); }, {"init_scale"});
  test::expect_error([] { train::GradScaler({1e39, 2.0, 0.5, 10}); }, {"init_scale"});
  test::expect_error([] { train::GradScaler({1.0, 1.0, 0.5, 10}); }, {"growth_factor"});
  test::expect_error([] { train::GradScaler({1.0, 2.0, 1.0, 10}); }, {"backoff_factor"});
  test::expect_error([] { train::GradScaler({1.0, 2.0, 0.5, 0}); }, {"growth_interval"});
  nlohmann::json j = s.to_json();
  j.erase("_growth_tracker");
  test::expect_error([&] { train::GradScaler::from_json(j, "x/trainer_state.json"); },
                     {"x/trainer_state.json", "_growth_tracker"});
  j = s.to_json();
  j["_growth_tracker"] = 5;
  test::expect_error([&] { train::GradScaler::from_json(j, "s.json"); }, {"s.json", "_growth_tracker"});
  test::expect_error([] { train::parse_precision("bf16", "--precision"); }, {"--precision", "bf16", "fp32", "f16"});
}

// ---------------------------------------------------------------------------------------------
// The fused check + norm, and unscale + clip

struct GradSet {
  std::vector<std::vector<double>> host;
  std::vector<Tensor> gpu;
};

// Scaled gradients of odd sizes: one element, under one chunk, several chunks with a ragged end.
GradSet scaled_grads(double scale) {
  Rng rng(5);
  GradSet s;
  for (size_t n : {size_t{1}, size_t{97}, size_t{4096 * 2 + 13}, size_t{300}}) {
    std::vector<double> v = test::as_f32(rng.normal(n, 0.01 * scale));
    s.gpu.push_back(test::to_gpu(v, {static_cast<int64_t>(n)}));
    s.host.push_back(std::move(v));
  }
  return s;
}

TEST(GradCheck, NormOfUnscaledGradientsAndOverflowFlag) {
  const double S = 65536.0;
  GradSet g = scaled_grads(S);
  const Tensor r = ops::grad_norm_and_overflow(g.gpu, static_cast<float>(1.0 / S));
  const std::vector<double> got = host(r);
  const ref::GradCheck want = ref::grad_norm_and_overflow(g.host, 1.0 / S);
  EXPECT_FALSE(want.found_inf);
  EXPECT_EQ(got[1], 0.0);
  EXPECT_NEAR(got[0], want.norm, 2e-6 * want.norm);
  test::expect_bitwise_equal(ops::grad_norm_and_overflow(g.gpu, static_cast<float>(1.0 / S)), r, "determinism");
  // Any inf or NaN anywhere sets the flag; the gradients themselves are not touched.
  for (float bad : {kInf, -kInf, std::numeric_limits<float>::quiet_NaN()}) {
    for (size_t t : {size_t{0}, size_t{2}}) {
      GradSet h = scaled_grads(S);
      const int64_t at = t == 2 ? 4096 * 2 + 12 : 0;  // the ragged last element of the long one
      h.gpu[t].slice(0, at, at + 1).fill_(bad);
      const std::vector<double> before = host(h.gpu[3]);
      const std::vector<double> flag = host(ops::grad_norm_and_overflow(h.gpu, static_cast<float>(1.0 / S)));
      EXPECT_EQ(flag[1], 1.0) << "value " << bad << " in tensor " << t;
      EXPECT_FALSE(std::isfinite(flag[0]));
      EXPECT_EQ(host(h.gpu[3]), before);
    }
  }
  // Finite values whose squares overflow f32 give an infinite norm but no overflow: torch checks
  // the elements, not the norm, and such a step is not skipped (clipping then zeroes it).
  std::vector<Tensor> huge = {Tensor::full({5}, 3e38f)};
  const std::vector<double> h = host(ops::grad_norm_and_overflow(huge, 1.0f));
  EXPECT_EQ(h[1], 0.0);
  EXPECT_TRUE(std::isinf(h[0]));
  test::expect_error([] { ops::grad_norm_and_overflow({}, 1.0f); }, {"grad_norm_and_overflow", "empty"});
  test::expect_error([] { ops::grad_norm_and_overflow({Tensor::zeros({0})}, 1.0f); }, {"grads[0]", "no elements"});
  test::expect_error([&] { ops::grad_norm_and_overflow(g.gpu, 0.0f); }, {"inv_scale"});
  const Tensor m = Tensor::zeros({4, 6});
  test::expect_error([&] { ops::grad_norm_and_overflow({m.transpose(0, 1)}, 1.0f); }, {"non-contiguous"});
}

TEST(GradCheck, UnscaleAndClipIsTorchsTwoMultiplies) {
  const double S = 1024.0;
  for (double max_norm : {1e-3, 1e3}) {  // clipping active, and a factor of exactly 1
    GradSet g = scaled_grads(S);
    const Tensor check = ops::grad_norm_and_overflow(g.gpu, static_cast<float>(1.0 / S));
    const float norm = static_cast<float>(host(check)[0]);
    ops::unscale_and_clip_(g.gpu, static_cast<float>(1.0 / S), check.slice(0, 0, 1), static_cast<float>(max_norm));
    // torch: grad.mul_(inv_scale) (rounded), then grad.mul_(clip_coef_clamped) (rounded), the
    // coefficient formed in f32 as clip_grad_norm_ forms it.
    float coef = (1.0f / (norm + 1e-6f)) * static_cast<float>(max_norm);
    coef = coef > 1.0f ? 1.0f : coef;
    std::vector<std::vector<double>> want = g.host;
    for (size_t t = 0; t < want.size(); ++t) {
      std::vector<double> expect(want[t].size());
      for (size_t i = 0; i < expect.size(); ++i) {
        const float unscaled = static_cast<float>(want[t][i]) * static_cast<float>(1.0 / S);
        expect[i] = static_cast<double>(unscaled * coef);
      }
      // Within one f32 rounding of the emulation: the device's division in the coefficient may
      // differ by an ulp; a missing or doubled unscale would be off by a factor of S.
      test::expect_close(g.gpu[t], expect, 0.0, 2.5e-7, "unscale_and_clip_");
    }
    ref::unscale_and_clip(want, 1.0 / S, max_norm);  // the double mathematics
    for (size_t t = 0; t < want.size(); ++t) test::expect_close(g.gpu[t], want[t], 0.0, 2e-6, "vs double");
  }
}

// ---------------------------------------------------------------------------------------------
// AdamW's gate

TEST(AdamWGate, SkippedUpdateChangesNothingAndIsUncounted) {
  Rng rng(9);
  const Tensor p = test::to_gpu(test::as_f32(rng.normal(777)), {777});
  const Tensor q = test::to_gpu(test::as_f32(rng.normal(33)), {3, 11});
  ops::AdamW opt({p, q}, {1e-2, 0.9, 0.999, 1e-8, 0.1});
  auto set_grads = [&](double scale) {
    Rng r(17);
    p.set_grad(test::to_gpu(test::as_f32(r.normal(777, scale)), {777}));
    q.set_grad(test::to_gpu(test::as_f32(r.normal(33, scale)), {3, 11}));
  };
  set_grads(1.0);
  opt.step();  // moments become nonzero
  opt.zero_grad();
  const std::vector<Tensor> before = {p.clone(), q.clone(), opt.exp_avg()[0].clone(), opt.exp_avg_sq()[1].clone()};
  const Tensor flag = Tensor::full({1}, 1.0f);
  set_grads(1.0);
  opt.step({flag, 1.0f});
  test::expect_bitwise_equal(p, before[0], "param after a skipped step");
  test::expect_bitwise_equal(q, before[1], "param after a skipped step");
  test::expect_bitwise_equal(opt.exp_avg()[0], before[2], "exp_avg after a skipped step");
  test::expect_bitwise_equal(opt.exp_avg_sq()[1], before[3], "exp_avg_sq after a skipped step");
  EXPECT_EQ(opt.step_count(), 2);
  opt.uncount_last_step();
  EXPECT_EQ(opt.step_count(), 1);
  EXPECT_EQ(opt.param_steps(), (std::vector<int64_t>{1, 1}));
  test::expect_error([&] { opt.uncount_last_step(); }, {"uncount_last_step"});

  // A clear flag with multiplier 1/S on gradients scaled by S (a power of two) is bitwise the
  // ungated step on unscaled gradients.
  const Tensor p2 = p.clone(), q2 = q.clone();
  ops::AdamW plain({p2, q2}, {1e-2, 0.9, 0.999, 1e-8, 0.1});
  plain.exp_avg()[0].copy_(opt.exp_avg()[0]);
  plain.exp_avg()[1].copy_(opt.exp_avg()[1]);
  plain.exp_avg_sq()[0].copy_(opt.exp_avg_sq()[0]);
  plain.exp_avg_sq()[1].copy_(opt.exp_avg_sq()[1]);
  plain.param_steps() = opt.param_steps();
  set_grads(1.0);
  p2.set_grad(p.grad());
  q2.set_grad(q.grad());
  plain.step();
  set_grads(4096.0);
  flag.fill_(0.0f);
  opt.step({flag, 1.0f / 4096.0f});
  test::expect_bitwise_equal(p, p2, "gated step with 1/S on S-scaled grads");
  test::expect_bitwise_equal(q, q2, "gated step with 1/S on S-scaled grads");
  test::expect_bitwise_equal(opt.exp_avg_sq()[0], plain.exp_avg_sq()[0], "exp_avg_sq");
  test::expect_error([&] { opt.step({Tensor::full({2}, 0.0f), 1.0f}); }, {"found_inf", "one-element"});
}

// Clipping folded into AdamW (what OptimizerStep does) updates exactly as clipping the gradients
// in place first and stepping on them: mixed precision (unscale 1/S, then clip) and fp32 (clip
// alone), clipping active and not, and a gated skip with clipping.
TEST(AdamWGate, ClipInsideTheUpdateIsClippingFirst) {
  for (const double S : {1024.0, 1.0}) {
    for (const double max_norm : {1e-3, 1e3}) {
      const std::string what = "S " + std::to_string(S) + ", max_norm " + std::to_string(max_norm);
      GradSet a = scaled_grads(S), b = scaled_grads(S);
      std::vector<Tensor> pa, pb;
      Rng rng(11);
      for (const Tensor& g : a.gpu) {
        pa.push_back(
            test::to_gpu(test::as_f32(rng.normal(static_cast<size_t>(g.numel()))), g.shape()));
        pb.push_back(pa.back().clone());
      }
      const ops::AdamWConfig cfg{1e-2, 0.9, 0.999, 1e-8, 0.1};
      ops::AdamW first(pa, cfg), folded(pb, cfg);
      for (size_t i = 0; i < pa.size(); ++i) {
        pa[i].set_grad(a.gpu[i]);
        pb[i].set_grad(b.gpu[i]);
      }
      const float inv = static_cast<float>(1.0 / S), mn = static_cast<float>(max_norm);
      ops::StepGate gate_a, gate_b;
      if (S != 1.0) {
        const Tensor check_a = ops::grad_norm_and_overflow(a.gpu, inv);
        ops::unscale_and_clip_(a.gpu, inv, check_a.slice(0, 0, 1), mn);
        gate_a.found_inf = check_a.slice(0, 1, 2);
        const Tensor check_b = ops::grad_norm_and_overflow(b.gpu, inv);
        gate_b = {check_b.slice(0, 1, 2), 1.0f, check_b.slice(0, 0, 1), mn, inv};
      } else {
        ops::clip_grad_norm_(a.gpu, mn);
        gate_b.clip_norm = ops::global_l2_norm(b.gpu);
        gate_b.max_norm = mn;
      }
      first.step(gate_a);
      folded.step(gate_b);
      for (size_t i = 0; i < pa.size(); ++i) {
        test::expect_bitwise_equal(pb[i], pa[i], what + ", param " + std::to_string(i));
        test::expect_bitwise_equal(folded.exp_avg()[i], first.exp_avg()[i], what + ", exp_avg");
        test::expect_bitwise_equal(folded.exp_avg_sq()[i], first.exp_avg_sq()[i],
                                   what + ", exp_avg_sq");
      }
      // The gradients themselves are left as they were.
      for (size_t i = 0; i < b.gpu.size(); ++i)
        test::expect_close(b.gpu[i], b.host[i], 0.0, 0.0, what + ", grad kept");
    }
  }
  // Gated and clipped: an overflow still leaves everything untouched.
  GradSet g = scaled_grads(8.0);
  std::vector<Tensor> params;
  for (const Tensor& t : g.gpu) params.push_back(Tensor::full(t.shape(), 0.5f));
  ops::AdamW opt(params, {1e-2, 0.9, 0.999, 1e-8, 0.1});
  for (size_t i = 0; i < params.size(); ++i) params[i].set_grad(g.gpu[i]);
  opt.step({Tensor::full({1}, 1.0f), 1.0f, Tensor::full({1}, 3.0f), 1.0f, 0.125f});
  for (const Tensor& p : params)
    test::expect_close(p, std::vector<double>(static_cast<size_t>(p.numel()), 0.5), 0.0, 0.0,
                       "skipped");
  test::expect_error(
      [&] {
        opt.step({{}, 0.5f, Tensor::full({1}, 3.0f), 1.0f, 1.0f});
      },
      {"AdamW", "clip_unscale", "grad_multiplier"});
  test::expect_error(
      [&] {
        opt.step({{}, 1.0f, Tensor::full({2}, 3.0f), 1.0f, 1.0f});
      },
      {"AdamW", "clip_norm", "one-element"});
  test::expect_error(
      [&] {
        opt.step({{}, 1.0f, Tensor::full({1}, 3.0f), -1.0f, 1.0f});
      },
      {"AdamW", "max_norm"});
}

// ---------------------------------------------------------------------------------------------
// OptimizerStep on a small MLP language model: logits = silu(x W1^T) W2^T, mean cross-entropy.

struct Mlp {
  static constexpr int64_t N = 12, D = 24, H = 40, V = 17;
  std::vector<double> x, w1, w2;
  std::vector<int32_t> labels;
  Mlp() {
    Rng rng(21);
    x = test::as_f32(rng.normal(N * D));
    w1 = test::as_f32(rng.normal(H * D, 0.3));
    w2 = test::as_f32(rng.normal(V * H, 0.3));
    labels = rng.ints(N, 0, V - 1);
    labels[3] = labels[8] = -100;
  }
  int64_t counted() const {
    int64_t c = 0;
    for (int32_t l : labels) c += l != -100;
    return c;
  }
};

struct GpuMlp {
  Tensor x, w1, w2, labels;
  explicit GpuMlp(const Mlp& m)
      : x(test::to_gpu(m.x, {Mlp::N, Mlp::D})),
        w1(test::to_gpu(m.w1, {Mlp::H, Mlp::D})),
        w2(test::to_gpu(m.w2, {Mlp::V, Mlp::H})),
        labels(Tensor::from_host_i32(m.labels, {Mlp::N})) {
    w1.set_requires_grad(true);
    w2.set_requires_grad(true);
  }
  // Forward, loss scaled by loss_factor / counted, backward seeded by `update`; returns loss_sum.
  Tensor forward_backward(const train::OptimizerStep& update, double loss_factor, int64_t counted) const {
    autograd::Tape tape;
    Tensor loss_sum, loss;
    {
      autograd::TapeScope scope(tape);
      const Tensor logits = ops::linear(ops::silu(ops::linear(x, w1)), w2);
      loss_sum = ops::cross_entropy_parts(logits, labels).loss_sum;
      loss = ops::scale(loss_sum, static_cast<float>(loss_factor / static_cast<double>(counted)));
    }
    tape.backward(loss, update.backward_seed());
    return loss_sum;
  }
};

// The fp64 reference: loss and the gradients of loss_factor * mean cross-entropy.
struct MlpGrads {
  double loss;
  std::vector<double> w1, w2;
};
MlpGrads reference_grads(const Mlp& m, double loss_factor) {
  const int64_t N = Mlp::N, D = Mlp::D, H = Mlp::H, V = Mlp::V;
  std::vector<double> h(N * H), a(N * H), z(N * V), dz(N * V, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < H; ++j) {
      double s = 0;
      for (int64_t d = 0; d < D; ++d) s += m.x[n * D + d] * m.w1[j * D + d];
      h[n * H + j] = s;
      a[n * H + j] = s / (1.0 + std::exp(-s));
    }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = 0; v < V; ++v) {
      double s = 0;
      for (int64_t j = 0; j < H; ++j) s += a[n * H + j] * m.w2[v * H + j];
      z[n * V + v] = s;
    }
  const double count = static_cast<double>(m.counted());
  MlpGrads g{0.0, std::vector<double>(H * D, 0.0), std::vector<double>(V * H, 0.0)};
  for (int64_t n = 0; n < N; ++n) {
    if (m.labels[n] == -100) continue;
    double mx = -1e300, sum = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, z[n * V + v]);
    for (int64_t v = 0; v < V; ++v) sum += std::exp(z[n * V + v] - mx);
    g.loss += (mx + std::log(sum) - z[n * V + m.labels[n]]) / count;
    for (int64_t v = 0; v < V; ++v)
      dz[n * V + v] = loss_factor * (std::exp(z[n * V + v] - mx) / sum - (v == m.labels[n] ? 1.0 : 0.0)) / count;
  }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < H; ++j) {
      double da = 0;
      for (int64_t v = 0; v < V; ++v) {
        da += dz[n * V + v] * m.w2[v * H + j];
        g.w2[v * H + j] += dz[n * V + v] * a[n * H + j];
      }
      const double sig = 1.0 / (1.0 + std::exp(-h[n * H + j]));
      const double dh = da * sig * (1.0 + h[n * H + j] * (1.0 - sig));
      for (int64_t d = 0; d < D; ++d) g.w1[j * D + d] += dh * m.x[n * D + d];
    }
  return g;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

train::LrSchedule cosine_schedule(int64_t total) {
  train::ScheduleConfig sc;
  sc.type = "cosine";
  sc.learning_rate = 1e-2;
  sc.total_steps = total;
  return train::LrSchedule(sc);
}

TEST(OptimizerStep, OverflowSkipsTheStepAndHoldsTheScheduleBack) {
  const Precision f16(MatmulPrecision::F16);
  const Mlp m;
  const GpuMlp g(m);
  ops::AdamW opt({g.w1, g.w2}, {1e-2, 0.9, 0.999, 1e-8, 0.01});
  const train::LrSchedule schedule = cosine_schedule(6);
  train::OptimizerStep update(opt, schedule, 1.0, train::GradScalerConfig{});
  update.inject_overflow_at({2, 3});
  EXPECT_TRUE(update.mixed());
  std::vector<train::StepOutcome> outs;
  for (int64_t step = 1; step <= 5; ++step) {
    const std::vector<Tensor> before = {g.w1.clone(), g.w2.clone(), opt.exp_avg()[0].clone(),
                                        opt.exp_avg_sq()[1].clone()};
    const std::vector<int64_t> steps_before = opt.param_steps();
    update.record(step, g.forward_backward(update, 1.0, m.counted()));
    EXPECT_FALSE(g.w1.grad().defined()) << "gradients are dropped after the update";
    outs.push_back(update.finish());
    const train::StepOutcome& o = outs.back();
    EXPECT_EQ(o.skipped, step == 2 || step == 3) << "step " << step;
    EXPECT_TRUE(std::isfinite(o.loss_sum));
    if (o.skipped) {
      test::expect_bitwise_equal(g.w1, before[0], "w1 after a skipped step");
      test::expect_bitwise_equal(g.w2, before[1], "w2 after a skipped step");
      test::expect_bitwise_equal(opt.exp_avg()[0], before[2], "exp_avg after a skipped step");
      test::expect_bitwise_equal(opt.exp_avg_sq()[1], before[3], "exp_avg_sq after a skipped step");
      EXPECT_EQ(opt.param_steps(), steps_before);
      EXPECT_FALSE(std::isfinite(o.grad_norm)) << "the norm of inf gradients is logged as it is";
    } else {
      EXPECT_NE(host(g.w1), host(before[0])) << "step " << step << " updated nothing";
      EXPECT_TRUE(std::isfinite(o.grad_norm));
    }
  }
  // Scale: 2^16 for steps 1-2, halved by each overflow.
  EXPECT_EQ(outs[0].loss_scale, 65536.0f);
  EXPECT_EQ(outs[1].loss_scale, 65536.0f);
  EXPECT_EQ(outs[2].loss_scale, 32768.0f);
  EXPECT_EQ(outs[3].loss_scale, 16384.0f);
  EXPECT_EQ(outs[4].loss_scale, 16384.0f);
  EXPECT_EQ(update.scaler()->scale(), 16384.0f);
  EXPECT_EQ(update.scaler()->growth_tracker(), 2);
  EXPECT_EQ(update.skipped_steps(), 2);
  EXPECT_EQ(opt.param_steps(), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(opt.step_count(), 3);
  // transformers' Trainer does not step its scheduler on a skipped step: global steps 2 and 3 both
  // use the schedule's second value, step 4 its second again (two skips behind), step 5 its third.
  EXPECT_EQ(outs[0].lr, schedule.lr_at(1));
  EXPECT_EQ(outs[1].lr, schedule.lr_at(2));
  EXPECT_EQ(outs[2].lr, schedule.lr_at(2));
  EXPECT_EQ(outs[3].lr, schedule.lr_at(2));
  EXPECT_EQ(outs[4].lr, schedule.lr_at(3));
}

TEST(OptimizerStep, ScaleGrowsAfterTheIntervalAndBacksOffOnOverflow) {
  const Precision f16(MatmulPrecision::F16);
  const Mlp m;
  const GpuMlp g(m);
  ops::AdamW opt({g.w1, g.w2}, {1e-3, 0.9, 0.999, 1e-8, 0.0});
  const train::LrSchedule schedule = cosine_schedule(10);
  train::OptimizerStep update(opt, schedule, 0.0, train::GradScalerConfig{256.0, 2.0, 0.5, 3});
  update.inject_overflow_at({5});
  std::vector<float> scales;
  for (int64_t step = 1; step <= 9; ++step) {
    update.record(step, g.forward_backward(update, 1.0, m.counted()));
    scales.push_back(update.finish().loss_scale);
  }
  // Clean steps 1-3 -> 512 from step 4; step 5 overflows -> 256 from 6; 6-8 clean -> 512 at 9.
  EXPECT_EQ(scales, (std::vector<float>{256, 256, 256, 512, 512, 256, 256, 256, 512}));
  EXPECT_EQ(update.skipped_steps(), 1);
}

// Loss scaling is exact arithmetic: with fp32 products, seeding with S, unscaling fused into
// clipping (or into AdamW with clipping off) and the gated AdamW give bitwise the parameters and
// moments of the fp32 step. (With f16 products the two runs differ by the products' rounding.)
TEST(OptimizerStep, WithFp32ProductsAScaledStepIsBitwiseTheFp32Step) {
  const Precision fp32(MatmulPrecision::F32);
  const Mlp m;
  for (double max_norm : {0.0, 0.05, 100.0}) {
    for (double scale : {65536.0, std::ldexp(1.0, 40)}) {
      SCOPED_TRACE(testing::Message() << "max_grad_norm " << max_norm << ", scale " << scale);
      const GpuMlp a(m), b(m);
      ops::AdamW opt_a({a.w1, a.w2}, {1e-2, 0.9, 0.999, 1e-8, 0.01});
      ops::AdamW opt_b({b.w1, b.w2}, {1e-2, 0.9, 0.999, 1e-8, 0.01});
      const train::LrSchedule schedule = cosine_schedule(3);
      train::OptimizerStep plain(opt_a, schedule, max_norm, std::nullopt);
      train::OptimizerStep scaled(opt_b, schedule, max_norm, train::GradScalerConfig{scale, 2.0, 0.5, 2000});
      EXPECT_FALSE(plain.backward_seed().defined());
      for (int64_t step = 1; step <= 3; ++step) {
        plain.record(step, a.forward_backward(plain, 1.0, m.counted()));
        scaled.record(step, b.forward_backward(scaled, 1.0, m.counted()));
        const train::StepOutcome pa = plain.finish(), sb = scaled.finish();
        EXPECT_FALSE(sb.skipped);
        EXPECT_EQ(pa.loss_sum, sb.loss_sum);
        if (max_norm > 0) {
          EXPECT_NEAR(sb.grad_norm, pa.grad_norm, 1e-6 * pa.grad_norm);
        }
      }
      test::expect_bitwise_equal(a.w1, b.w1, "w1");
      test::expect_bitwise_equal(a.w2, b.w2, "w2");
      test::expect_bitwise_equal(opt_a.exp_avg_sq()[0], opt_b.exp_avg_sq()[0], "exp_avg_sq");
    }
  }
}

// The fp32 path is what train() always did: clip_grad_norm_, then AdamW, the norm reported.
TEST(OptimizerStep, Fp32PathIsClippingThenAdamW) {
  const Precision fp32(MatmulPrecision::F32);
  const Mlp m;
  const GpuMlp a(m), b(m);
  ops::AdamW opt_a({a.w1, a.w2}, {1e-2, 0.9, 0.999, 1e-8, 0.01});
  ops::AdamW opt_b({b.w1, b.w2}, {1e-2, 0.9, 0.999, 1e-8, 0.01});
  const train::LrSchedule schedule = cosine_schedule(2);
  train::OptimizerStep update(opt_a, schedule, 0.05, std::nullopt);
  for (int64_t step = 1; step <= 2; ++step) {
    update.record(step, a.forward_backward(update, 1.0, m.counted()));
    const train::StepOutcome o = update.finish();
    EXPECT_EQ(o.loss_scale, 0.0f);
    b.forward_backward(update, 1.0, m.counted());
    const float norm = ops::clip_grad_norm_({b.w1.grad(), b.w2.grad()}, 0.05f).item();
    opt_b.set_lr(schedule.lr_at(step));
    opt_b.step();
    opt_b.zero_grad();
    EXPECT_EQ(o.grad_norm, norm);
    EXPECT_EQ(o.lr, schedule.lr_at(step));
  }
  test::expect_bitwise_equal(a.w1, b.w1, "w1");
  test::expect_bitwise_equal(a.w2, b.w2, "w2");
}

// A mixed-precision step against fp64: gradients (unscaled) and parameters after clipping and
// AdamW. Tolerance at half precision: gradients within 1% of the tensor's largest gradient (f16
// operands carry 2^-11 relative error; a few dozen terms per product); AdamW's step-1 update
// lr * g / (|g| + eps) moves by at most lr * |dg| / eps, so with eps = the largest gradient the
// parameters are within 1% of lr of the reference.
TEST(OptimizerStep, MixedStepMatchesFp64AtHalfPrecisionTolerance) {
  const Precision f16(MatmulPrecision::F16);
  const Mlp m;
  // 1: an ordinary loss. 2^-20: gradients that f16 products would flush to zero unscaled.
  for (double loss_factor : {1.0, std::ldexp(1.0, -20)}) {
    SCOPED_TRACE(testing::Message() << "loss factor " << loss_factor);
    const MlpGrads want = reference_grads(m, loss_factor);
    const GpuMlp g(m);
    const double gmax = std::max(max_abs(want.w1), max_abs(want.w2));
    const double lr = 1e-2, max_norm = 0.5 * ref::global_l2_norm({want.w1, want.w2});  // clipping active
    ops::AdamW opt({g.w1, g.w2}, {lr, 0.9, 0.999, gmax, 0.01});
    train::ScheduleConfig sc;
    sc.type = "constant";
    sc.learning_rate = lr;
    sc.total_steps = 1;
    const train::LrSchedule schedule(sc);
    train::OptimizerStep update(opt, schedule, max_norm, train::GradScalerConfig{});
    const Tensor loss_sum = g.forward_backward(update, loss_factor, m.counted());
    const double S = update.scaler()->scale();
    std::vector<double> g1 = host(g.w1.grad()), g2 = host(g.w2.grad());
    for (double& v : g1) v /= S;
    for (double& v : g2) v /= S;
    test::expect_close(g1, want.w1, 1e-2 * max_abs(want.w1), 0.0, "grad w1 (unscaled)");
    test::expect_close(g2, want.w2, 1e-2 * max_abs(want.w2), 0.0, "grad w2 (unscaled)");
    update.record(1, loss_sum);
    const train::StepOutcome o = update.finish();
    EXPECT_FALSE(o.skipped);
    EXPECT_NEAR(o.loss_sum / static_cast<double>(m.counted()), want.loss, 1e-2 * want.loss);
    std::vector<std::vector<double>> grads = {want.w1, want.w2};
    ref::clip_grad_norm(grads, max_norm);
    std::vector<double> p1 = m.w1, p2 = m.w2, m1(p1.size(), 0.0), v1(p1.size(), 0.0), m2(p2.size(), 0.0),
                        v2(p2.size(), 0.0);
    ref::adamw_step(p1, grads[0], m1, v1, {lr, 0.9, 0.999, gmax, 0.01}, 1);
    ref::adamw_step(p2, grads[1], m2, v2, {lr, 0.9, 0.999, gmax, 0.01}, 1);
    test::expect_close(g.w1, p1, 1e-2 * lr, 0.0, "w1 after the step");
    test::expect_close(g.w2, p2, 1e-2 * lr, 0.0, "w2 after the step");
  }
}

// ---------------------------------------------------------------------------------------------
// train(): the loop logs and schedules skipped steps as transformers' Trainer does.

models::DecoderModel tiny_llama() {
  const nlohmann::json c = {{"model_type", "llama"},   {"vocab_size", 40},        {"hidden_size", 16},
                            {"intermediate_size", 24}, {"num_hidden_layers", 1},  {"num_attention_heads", 2},
                            {"num_key_value_heads", 1}, {"max_position_embeddings", 64}};
  return test::random_decoder(c, 3, 0.1);
}

TEST(TrainMixedPrecision, SkippedStepsAreLoggedAndHoldTheScheduleBack) {
  Rng rng(4);
  std::vector<train::Example> data(8);
  for (auto& e : data) {
    e.ids = rng.ints(9, 0, 39);
    e.labels = e.ids;
  }
  train::TrainOptions o;
  o.max_steps = 5;
  o.batch_size = 2;
  o.schedule.type = "linear";
  o.schedule.learning_rate = 1e-2;
  o.precision = MatmulPrecision::F16;
  o.inject_overflow_at = {2};
  std::vector<std::string> lines;
  models::DecoderModel model = tiny_llama();
  const train::TrainResult r = train::train(model, data, {}, o, [&](const std::string& l) { lines.push_back(l); });
  EXPECT_EQ(matmul_precision(), MatmulPrecision::F32) << "train() restores the precision";
  ASSERT_EQ(r.log.size(), 5u);
  train::ScheduleConfig sc = o.schedule;
  sc.total_steps = 5;
  const train::LrSchedule schedule(sc);
  const double lrs[] = {schedule.lr_at(1), schedule.lr_at(2), schedule.lr_at(2), schedule.lr_at(3), schedule.lr_at(4)};
  const float scales[] = {65536, 65536, 32768, 32768, 32768};
  for (size_t i = 0; i < 5; ++i) {
    SCOPED_TRACE(i + 1);
    EXPECT_EQ(r.log[i].step, static_cast<int64_t>(i + 1)) << "the global step advances on a skip";
    EXPECT_EQ(r.log[i].skipped, i == 1);
    EXPECT_EQ(r.log[i].lr, lrs[i]);
    EXPECT_EQ(r.log[i].loss_scale, scales[i]);
    EXPECT_TRUE(std::isfinite(r.log[i].loss));
  }
  bool announced = false, mode = false;
  for (const auto& l : lines) {
    announced = announced || l.find("step 2/5  inf/nan gradients: update skipped, loss scale 65536 -> 32768") == 0;
    mode = mode || l.find("mixed precision: f16 matrix products") == 0;
  }
  EXPECT_TRUE(announced && mode);

  // Every step overflowing: the model is bitwise what it was.
  models::DecoderModel untouched = tiny_llama(), trained = tiny_llama();
  o.inject_overflow_at = {1, 2, 3, 4, 5};
  const train::TrainResult all = train::train(trained, data, {}, o);
  for (const auto& n : trained.parameter_names())
    test::expect_bitwise_equal(trained.param(n), untouched.param(n), n);
  EXPECT_EQ(all.log.back().loss_scale, 4096.0f);
}

}  // namespace
}  // namespace vkf
