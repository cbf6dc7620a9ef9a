// Optimizer tests: AdamW and SGD over three steps against two references, torch's fp32
// arithmetic emulated on the CPU (to within a few ulp) and the plain double mathematics (within
// fp32 tolerance); weight decay 0 / 0.01, eps 1e-8 / 1e-3, both lerp branches, momentum,
// dampening, nesterov; per-parameter weight decay and step numbers; learning-rate changes;
// determinism; results of torch itself (a committed fixture); errors on bad input.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "ops/optim.h"
#include "ops/optim_ref.h"
#include "test_util.h"
#include "vk/context.h"
#include "vk/error.h"

namespace vkf {
namespace {

using test::Rng;

std::vector<float> to_f(const std::vector<double>& v) {
  return {v.begin(), v.end()};
}
std::vector<double> to_d(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}

Tensor gpu(const std::vector<float>& v, const Shape& shape) {
  return Tensor::from_host(std::span<const float>(v), shape);
}

double ulp(double x) {
  const float f = std::fabs(static_cast<float>(x));
  return static_cast<double>(std::nextafter(f, std::numeric_limits<float>::infinity()) - f);
}

// |got - want| <= ulps * ulp(want) + ulps * ulp(scale): a few ulp of the value, and of the size of
// the last update (`scale`), whose division and sqrt a GPU may round within Vulkan's bounds.
void expect_ulps(const std::vector<double>& got, const std::vector<float>& want, int ulps,
                 double scale, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    const double tol = ulps * (ulp(want[i]) + ulp(scale));
    worst = std::max(worst, err / ulp(want[i]));
    if (!(err <= tol) && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size()
                     << " elements off the fp32 emulation by more than " << ulps
                     << " ulp; first at " << first << ": got " << got[first] << " want "
                     << want[first] << " (worst " << worst << " ulp)";
}

// Gradients with the cases that matter for Adam: ordinary values, zeros, and values near eps.
std::vector<float> adam_grad(Rng& rng, size_t n) {
  auto g = rng.normal(n, 0.1);
  for (size_t i = 0; i < n; ++i) {
    if (i % 7 == 3) g[i] = 0.0;
    if (i % 11 == 5) g[i] *= 1e-7;
  }
  return to_f(g);
}

const Shape kShapes[] = {{1}, {7}, {61, 37}, {1000}};

struct AdamState {
  std::vector<float> p, m, v;      // the fp32 emulation
  std::vector<double> pd, md, vd;  // the double reference
};

TEST(AdamW, ThreeStepsMatchTorchArithmeticAndDouble) {
  struct Config {
    ops::AdamWConfig c;
    const char* name;
  };
  const Config configs[] = {
      {{1e-3, 0.9, 0.999, 1e-8, 0.0}, "wd 0, eps 1e-8"},
      {{1e-3, 0.9, 0.999, 1e-8, 0.01}, "wd 0.01, eps 1e-8"},
      {{1e-3, 0.9, 0.999, 1e-3, 0.01}, "wd 0.01, eps 1e-3"},
      {{1e-3, 0.9, 0.999, 1e-3, 0.0}, "wd 0, eps 1e-3"},
      {{3e-2, 0.3, 0.95, 1e-6, 0.1}, "beta1 0.3 (lerp from the end), large lr and wd"},
  };
  Rng rng(31);
  for (const auto& cfg : configs) {
    std::vector<Tensor> params;
    std::vector<AdamState> st;
    for (const auto& s : kShapes) {
      AdamState a;
      a.p = to_f(rng.uniform(static_cast<size_t>(shape_numel(s))));
      a.m.assign(a.p.size(), 0.0f);
      a.v.assign(a.p.size(), 0.0f);
      a.pd = to_d(a.p);
      a.md.assign(a.p.size(), 0.0);
      a.vd.assign(a.p.size(), 0.0);
      params.push_back(gpu(a.p, s));
      st.push_back(std::move(a));
    }
    ops::AdamW opt(params, cfg.c);
    for (int64_t t = 1; t <= 3; ++t) {
      const double lr = cfg.c.lr * (1.0 - 0.2 * static_cast<double>(t - 1));  // a schedule
      opt.set_lr(lr);
      const ref::AdamWHyper h{lr, cfg.c.beta1, cfg.c.beta2, cfg.c.eps, cfg.c.weight_decay};
      for (size_t i = 0; i < params.size(); ++i) {
        const auto g = adam_grad(rng, st[i].p.size());
        params[i].set_grad(gpu(g, params[i].shape()));
        ref::adamw_step_f32(st[i].p, g, st[i].m, st[i].v, h, t);
        ref::adamw_step(st[i].pd, to_d(g), st[i].md, st[i].vd, h, t);
      }
      opt.step();
      EXPECT_EQ(opt.step_count(), t);
      for (size_t i = 0; i < params.size(); ++i) {
        const std::string what = std::string(cfg.name) + ", step " + std::to_string(t) +
                                 ", shape " + shape_str(params[i].shape());
        expect_ulps(params[i].to_double(), st[i].p, 4, lr, what + " param");
        // The moments need only correctly rounded +, *, and fma: bitwise equal on any device.
        expect_ulps(opt.exp_avg()[i].to_double(), st[i].m, 0, 0.0, what + " exp_avg");
        expect_ulps(opt.exp_avg_sq()[i].to_double(), st[i].v, 0, 0.0, what + " exp_avg_sq");
        test::expect_close(params[i], st[i].pd, 1e-8, 5e-7, what + " param vs double");
        // exp_avg cancels (0.9 m + 0.1 g): its f32 error is a fraction of ulp(g) ~ 1e-8.
        test::expect_close(opt.exp_avg()[i], st[i].md, 2e-8, 1e-6, what + " exp_avg vs double");
        test::expect_close(opt.exp_avg_sq()[i], st[i].vd, 1e-18, 1e-6,
                           what + " exp_avg_sq vs double");
      }
    }
  }
}

TEST(AdamW, SkipsParamsWithoutGradAndKeepsPerParamSteps) {
  Rng rng(32);
  const ops::AdamWConfig cfg{1e-2, 0.9, 0.999, 1e-8, 0.01};
  const auto a0 = to_f(rng.uniform(13)), b0 = to_f(rng.uniform(5));
  Tensor a = gpu(a0, {13}), b = gpu(b0, {5});
  // b is not decayed (as the HF Trainer treats biases and norm weights).
  ops::AdamW opt({a, b}, cfg, {0.01, 0.0});
  AdamState sa{a0, std::vector<float>(13), std::vector<float>(13), {}, {}, {}};
  AdamState sb{b0, std::vector<float>(5), std::vector<float>(5), {}, {}, {}};
  const ref::AdamWHyper ha{cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, 0.01};
  const ref::AdamWHyper hb{cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, 0.0};
  for (int step = 1; step <= 3; ++step) {
    const auto ga = adam_grad(rng, 13), gb = adam_grad(rng, 5);
    a.set_grad(gpu(ga, {13}));
    if (step == 1) {
      b.zero_grad();  // b has no gradient at step 1: torch skips it and its step stays 0
    } else {
      b.set_grad(gpu(gb, {5}));
      ref::adamw_step_f32(sb.p, gb, sb.m, sb.v, hb, step - 1);
    }
    ref::adamw_step_f32(sa.p, ga, sa.m, sa.v, ha, step);
    opt.step();
    if (step == 1) {
      EXPECT_EQ(b.to_double(), to_d(b0)) << "a parameter without grad changed";
    }
  }
  EXPECT_EQ(opt.param_steps(), (std::vector<int64_t>{3, 2}));
  expect_ulps(a.to_double(), sa.p, 4, cfg.lr, "a");
  expect_ulps(b.to_double(), sb.p, 4, cfg.lr, "b (per-param steps, no decay)");
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
}

TEST(AdamW, FreeFunctionAtLaterStepAndDeterminism) {
  Rng rng(33);
  const ops::AdamWConfig cfg{2e-3, 0.9, 0.999, 1e-8, 0.01};
  const size_t n = 4099;
  auto p = to_f(rng.uniform(n)), g = adam_grad(rng, n);
  auto m = to_f(rng.normal(n, 0.05));
  auto v = to_f(rng.uniform(n, 0.0, 0.01));
  Tensor tp[2], tm[2], tv[2];
  for (int k = 0; k < 2; ++k) {
    tp[k] = gpu(p, {static_cast<int64_t>(n)});
    tm[k] = gpu(m, {static_cast<int64_t>(n)});
    tv[k] = gpu(v, {static_cast<int64_t>(n)});
    ops::adamw_update(tp[k], gpu(g, {static_cast<int64_t>(n)}), tm[k], tv[k], cfg, 5);
  }
  test::expect_bitwise_equal(tp[0], tp[1], "param");
  test::expect_bitwise_equal(tm[0], tm[1], "exp_avg");
  test::expect_bitwise_equal(tv[0], tv[1], "exp_avg_sq");
  ref::adamw_step_f32(p, g, m, v, {cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay}, 5);
  expect_ulps(tp[0].to_double(), p, 4, cfg.lr, "param at t = 5");
  expect_ulps(tm[0].to_double(), m, 0, 0.0, "exp_avg at t = 5");
  expect_ulps(tv[0].to_double(), v, 0, 0.0, "exp_avg_sq at t = 5");
}

// AdamW::step updates every parameter in one dispatch: tensors of whole 4096-element chunks
// (16-byte loads), ragged ends, tiny ones, a parameter at an odd offset inside its storage (the
// element-wise path), per-parameter decay, and one without a gradient, against torch's arithmetic.
TEST(AdamW, OneDispatchOverEveryTensor) {
  Rng rng(35);
  const ops::AdamWConfig cfg{3e-3, 0.9, 0.999, 1e-8, 0.05};
  const Tensor storage = gpu(to_f(rng.uniform(9001)), {9001});
  std::vector<Tensor> params;
  for (int64_t n : {4096, 3 * 4096 + 7, 8192, 1, 33})
    params.push_back(gpu(to_f(rng.uniform(static_cast<size_t>(n))), {n}));
  params.push_back(storage.slice(0, 1, 1 + 2 * 4096));   // whole chunks at a 4-byte offset
  params.push_back(gpu(to_f(rng.uniform(40)), {5, 8}));  // never gets a gradient
  const std::vector<double> outside_head = storage.slice(0, 0, 1).to_double();
  const std::vector<double> outside_tail = storage.slice(0, 1 + 2 * 4096, 9001).to_double();
  std::vector<double> decay{0.05, 0.0, 0.05, 0.0, 0.05, 0.05, 0.05};
  std::vector<AdamState> st;
  for (const Tensor& p : params) {
    AdamState a;
    const auto d = p.to_double();
    a.p = to_f(d);
    a.m.assign(d.size(), 0.0f);
    a.v.assign(d.size(), 0.0f);
    st.push_back(std::move(a));
  }
  ops::AdamW opt(params, cfg, decay);
  auto& stream = vk::Context::get().stream();
  for (int64_t t = 1; t <= 2; ++t) {
    for (size_t i = 0; i + 1 < params.size(); ++i) {
      const auto g = adam_grad(rng, st[i].p.size());
      params[i].set_grad(gpu(g, params[i].shape()));
      ref::adamw_step_f32(st[i].p, g, st[i].m, st[i].v,
                          {cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, decay[i]}, t);
    }
    const uint64_t before = stream.dispatch_count();
    opt.step();
    EXPECT_EQ(stream.dispatch_count() - before, 1u) << "AdamW::step should be one dispatch";
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string what = "step " + std::to_string(t) + ", parameter " + std::to_string(i);
      expect_ulps(params[i].to_double(), st[i].p, 4, cfg.lr, what + " param");
      expect_ulps(opt.exp_avg()[i].to_double(), st[i].m, 0, 0.0, what + " exp_avg");
      expect_ulps(opt.exp_avg_sq()[i].to_double(), st[i].v, 0, 0.0, what + " exp_avg_sq");
    }
  }
  // The storage around the offset parameter is untouched.
  EXPECT_EQ(storage.slice(0, 0, 1).to_double(), outside_head);
  EXPECT_EQ(storage.slice(0, 1 + 2 * 4096, 9001).to_double(), outside_tail);
  EXPECT_EQ(opt.param_steps(), (std::vector<int64_t>{2, 2, 2, 2, 2, 2, 0}));
}

TEST(SGD, ThreeStepsMatchTorchArithmeticAndDouble) {
  struct Config {
    ops::SGDConfig c;
    const char* name;
  };
  const Config configs[] = {
      {{0.1, 0.0, 0.0, 0.0, false}, "plain"},
      {{0.1, 0.0, 0.0, 0.01, false}, "weight decay"},
      {{0.05, 0.9, 0.0, 0.0, false}, "momentum"},
      {{0.05, 0.9, 0.1, 0.01, false}, "momentum, dampening, weight decay"},
      {{0.05, 0.9, 0.0, 0.01, true}, "nesterov, weight decay"},
  };
  Rng rng(34);
  for (const auto& cfg : configs) {
    std::vector<Tensor> params;
    std::vector<std::vector<float>> p, buf;
    std::vector<std::vector<double>> pd, bufd;
    for (const auto& s : kShapes) {
      p.push_back(to_f(rng.uniform(static_cast<size_t>(shape_numel(s)))));
      pd.push_back(to_d(p.back()));
      buf.emplace_back();
      bufd.emplace_back();
      params.push_back(gpu(p.back(), s));
    }
    ops::SGD opt(params, cfg.c);
    for (int t = 1; t <= 3; ++t) {
      const ref::SGDHyper h{cfg.c.lr, cfg.c.momentum, cfg.c.dampening, cfg.c.weight_decay,
                            cfg.c.nesterov};
      for (size_t i = 0; i < params.size(); ++i) {
        const auto g = to_f(rng.normal(p[i].size()));
        params[i].set_grad(gpu(g, params[i].shape()));
        ref::sgd_step_f32(p[i], g, buf[i], h);
        ref::sgd_step(pd[i], to_d(g), bufd[i], h);
      }
      opt.step();
      for (size_t i = 0; i < params.size(); ++i) {
        const std::string what = std::string(cfg.name) + ", step " + std::to_string(t) +
                                 ", shape " + shape_str(params[i].shape());
        // Only products and exactly rounded fmas: bitwise equal on any device.
        expect_ulps(params[i].to_double(), p[i], 0, 0.0, what + " param");
        test::expect_close(params[i], pd[i], 1e-7, 1e-6, what + " param vs double");
        EXPECT_EQ(opt.momentum_buffer()[i].defined(), cfg.c.momentum != 0.0) << what;
        if (cfg.c.momentum != 0.0) {
          expect_ulps(opt.momentum_buffer()[i].to_double(), buf[i], 0, 0.0, what + " buffer");
          test::expect_close(opt.momentum_buffer()[i], bufd[i], 1e-6, 1e-6,
                             what + " buffer vs double");
        }
      }
    }
  }
}

// sgd_update's param.add_(grad, alpha=-lr) is one rounding of p - lr * g (torch fuses it) on any
// device, also where a separate multiply and add would round the other way: near-ties built by
// hand, and random cancellations, checked bitwise against std::fma.
TEST(SGD, UpdateIsRoundedOnceLikeFma) {
  const double lr = std::ldexp(1.0 + std::ldexp(1.0, -23), -12);  // 2^-12 (1 + 2^-23)
  const float neg_lr = static_cast<float>(-lr);
  // g * -lr = 2^-24 (1 - 2^-46), just under half an ulp of p = 1 + 2^-23: the exact sum rounds
  // down to p, while rounding the product first makes a tie that rounds up to 1 + 2^-22.
  const float g_tie = -std::ldexp(1.0f - std::ldexp(1.0f, -23), -12);
  std::vector<float> p = {1.0f + std::ldexp(1.0f, -23), -(1.0f + std::ldexp(1.0f, -23)),
                          std::ldexp(1.0f + std::ldexp(1.0f, -23), 5), 3.0f};
  std::vector<float> g = {g_tie, -g_tie, std::ldexp(g_tie, 5), g_tie};
  ASSERT_EQ(std::fma(g[0], neg_lr, p[0]), p[0]);
  ASSERT_NE(static_cast<float>(p[0] + static_cast<float>(g[0] * neg_lr)), p[0])
      << "the crafted case does not separate fused from unfused rounding";
  Rng rng(35);
  std::uniform_int_distribution<int> exponent(-30, 10);
  for (int i = 0; i < 200000; ++i) {
    const float gi = static_cast<float>(std::ldexp(rng.uniform(1, -1, 1)[0], exponent(rng.gen())));
    // p close to lr * g (heavy cancellation), or of an unrelated size.
    const double rel = i % 2 ? 1.0 + rng.uniform(1, -1e-6, 1e-6)[0] : rng.uniform(1, -4, 4)[0];
    g.push_back(gi);
    p.push_back(static_cast<float>(static_cast<double>(gi) * lr * rel));
  }
  const int64_t n = static_cast<int64_t>(p.size());
  Tensor tp = gpu(p, {n});
  ops::sgd_update(tp, gpu(g, {n}), Tensor(), ops::SGDConfig{lr, 0.0, 0.0, 0.0, false}, true);
  std::vector<float> want(p.size());
  for (size_t i = 0; i < p.size(); ++i) want[i] = std::fma(g[i], neg_lr, p[i]);
  expect_ulps(tp.to_double(), want, 0, 0.0, "p - lr * g rounded once");
}

// Results of torch 2.11 itself (tools/oracle/optim_fixture.py, on an x86-64 CPU with AVX-512):
// per config, p0 then per step grad, param and the state, N = 67 floats each.
std::vector<float> load_fixture(const char* name) {
  const auto path =
      std::filesystem::path(__FILE__).parent_path().parent_path() / "fixtures" / "optim" / name;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::vector<float> v(static_cast<size_t>(in.tellg()) / 4);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return v;
}

TEST(Optimizers, MatchTorchResults) {
  constexpr size_t n = 67;
  const Shape shape{static_cast<int64_t>(n)};
  auto slice = [&](const std::vector<float>& v, size_t& off) {
    std::vector<float> out(v.begin() + static_cast<ptrdiff_t>(off),
                           v.begin() + static_cast<ptrdiff_t>(off + n));
    off += n;
    return out;
  };
  const ops::AdamWConfig adam[] = {{1e-3, 0.9, 0.999, 1e-8, 0.0},
                                   {1e-3, 0.9, 0.999, 1e-8, 0.01},
                                   {1e-3, 0.9, 0.999, 1e-3, 0.01},
                                   {1e-3, 0.9, 0.999, 1e-3, 0.0},
                                   {3e-2, 0.3, 0.95, 1e-6, 0.1}};
  const auto a = load_fixture("adamw_torch.bin");
  ASSERT_EQ(a.size(), 5 * 13 * n);
  size_t off = 0;
  for (size_t c = 0; c < 5; ++c) {
    Tensor p = gpu(slice(a, off), shape);
    ops::AdamW opt({p}, adam[c]);
    for (int t = 1; t <= 3; ++t) {
      p.set_grad(gpu(slice(a, off), shape));
      opt.step();
      const std::string what = "AdamW config " + std::to_string(c) + " step " + std::to_string(t);
      // torch's CPU sqrt (MKL) is off by an ulp now and then: the parameters agree to a few ulp.
      expect_ulps(p.to_double(), slice(a, off), 4, adam[c].lr, what + " param");
      expect_ulps(opt.exp_avg()[0].to_double(), slice(a, off), 0, 0.0, what + " exp_avg");
      expect_ulps(opt.exp_avg_sq()[0].to_double(), slice(a, off), 0, 0.0, what + " exp_avg_sq");
    }
  }
  const ops::SGDConfig sgd[] = {{0.1, 0.0, 0.0, 0.0, false},
                                {0.1, 0.0, 0.0, 0.01, false},
                                {0.05, 0.9, 0.0, 0.0, false},
                                {0.05, 0.9, 0.1, 0.01, false},
                                {0.05, 0.9, 0.0, 0.01, true}};
  const auto s = load_fixture("sgd_torch.bin");
  ASSERT_EQ(s.size(), 5 * 10 * n);
  off = 0;
  for (size_t c = 0; c < 5; ++c) {
    Tensor p = gpu(slice(s, off), shape);
    ops::SGD opt({p}, sgd[c]);
    for (int t = 1; t <= 3; ++t) {
      p.set_grad(gpu(slice(s, off), shape));
      opt.step();
      const std::string what = "SGD config " + std::to_string(c) + " step " + std::to_string(t);
      expect_ulps(p.to_double(), slice(s, off), 0, 0.0, what + " param");
      const auto buf = slice(s, off);
      if (sgd[c].momentum != 0.0)
        expect_ulps(opt.momentum_buffer()[0].to_double(), buf, 0, 0.0, what + " buffer");
    }
  }
}

TEST(Optimizers, ErrorsOnBadInput) {
  Tensor p = Tensor::zeros({4, 3});
  const ops::AdamWConfig ok{};
  auto adamw_with = [&](auto mutate) {
    ops::AdamWConfig c = ok;
    mutate(c);
    return ops::AdamW({p}, c);
  };
  EXPECT_THROW(adamw_with([](auto& c) { c.lr = -1e-3; }), Error);
  EXPECT_THROW(adamw_with([](auto& c) { c.beta1 = 1.0; }), Error);
  EXPECT_THROW(adamw_with([](auto& c) { c.beta2 = -0.1; }), Error);
  EXPECT_THROW(adamw_with([](auto& c) { c.eps = -1.0; }), Error);
  EXPECT_THROW(adamw_with([](auto& c) { c.weight_decay = std::nan(""); }), Error);
  EXPECT_THROW(ops::AdamW({Tensor()}, ok), Error);
  EXPECT_THROW(ops::AdamW({Tensor::zeros({3}, DType::I32)}, ok), Error);
  EXPECT_THROW(ops::AdamW({p.transpose(0, 1)}, ok), Error);
  EXPECT_THROW(ops::AdamW({p, p}, ok), Error);
  EXPECT_THROW(ops::AdamW({p}, ok, {0.1, 0.0}), Error);
  EXPECT_THROW(ops::AdamW({p}, ok, {-0.1}), Error);
  ops::AdamW opt({p}, ok);
  EXPECT_THROW(opt.set_lr(-1.0), Error);
  Tensor m = Tensor::zeros({4, 3}), v = Tensor::zeros({4, 3});
  EXPECT_THROW(ops::adamw_update(p, Tensor::zeros({3, 4}), m, v, ok, 1), Error);
  EXPECT_THROW(ops::adamw_update(p, Tensor::zeros({4, 3}, DType::F16), m, v, ok, 1), Error);
  EXPECT_THROW(ops::adamw_update(p, Tensor(), m, v, ok, 1), Error);
  EXPECT_THROW(ops::adamw_update(p, Tensor::zeros({4, 3}), Tensor::zeros({12}), v, ok, 1), Error);
  EXPECT_THROW(ops::adamw_update(p, Tensor::zeros({4, 3}), m, Tensor(), ok, 1), Error);
  EXPECT_THROW(ops::adamw_update(p, Tensor::zeros({4, 3}), m, v, ok, 0), Error);
  test::expect_error(
      [&] {
        ops::adamw_update(p, Tensor::zeros({3, 4}), m, v, ok, 1);
      },
      {"adamw_update", "[3, 4]", "[4, 3]"});

  EXPECT_THROW(ops::SGD({p}, ops::SGDConfig{-0.1, 0.0, 0.0, 0.0, false}), Error);
  EXPECT_THROW(ops::SGD({p}, ops::SGDConfig{0.1, -0.9, 0.0, 0.0, false}), Error);
  EXPECT_THROW(ops::SGD({p}, ops::SGDConfig{0.1, 0.0, 0.0, 0.0, true}), Error);  // no momentum
  EXPECT_THROW(ops::SGD({p}, ops::SGDConfig{0.1, 0.9, 0.1, 0.0, true}), Error);  // dampening
  EXPECT_THROW(ops::SGD({p, p}, ops::SGDConfig{}), Error);
  const ops::SGDConfig momentum{0.1, 0.9, 0.0, 0.0, false};
  EXPECT_THROW(ops::sgd_update(p, Tensor::zeros({4, 3}), Tensor(), momentum, true), Error);
  EXPECT_THROW(ops::sgd_update(p, Tensor::zeros({4, 3}), Tensor::zeros({3}), momentum, false),
               Error);
  EXPECT_THROW(ops::sgd_update(p, Tensor::zeros({2, 6}), Tensor::zeros({4, 3}), momentum, false),
               Error);
  EXPECT_NO_THROW(ops::sgd_update(p, Tensor::zeros({4, 3}), Tensor(), ops::SGDConfig{}, true));
}

}  // namespace
}  // namespace vkf
