// The decode step's attention fused with its output projection (ops::attention_decode_rope_o)
// and the MLP's gated product that adds the projection's partial sums to the residual
// (ops::gated_linear with a PendingResidual): the partials against attention_decode_rope followed
// by a double-precision projection, set by set, the cache writes against attention_decode_rope's
// bit for bit, the same bits on a second call; the pending gated product against the host's
// fp32 sum of the partials and the plain gated product on it, bit for bit, staged and composed;
// a batch-1 decode step of an f16 model with the fusion against the step without it (one
// dispatch fewer per layer, logits at fp32 tolerance, replay equal to eager); bad input.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/dtype.h"
#include "infer/decode_step.h"
#include "models/decoder.h"
#include "models/registry.h"
#include "ops/activation_ref.h"
#include "ops/decode.h"
#include "ops/matmul_kernels.h"
#include "ops/matmul_ref.h"
#include "ops/norm_ref.h"
#include "test_util.h"

namespace vkf {
namespace {

using test::Rng;

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

struct FusedOCase {
  int64_t cap, hq, hkv, d, rot, slot, out;
  int64_t window;
  float softcap;
  bool interleaved;
};

void check_fused_o(Rng& rng, const FusedOCase& c) {
  const int64_t P = c.slot + 5, half = c.rot / 2, row = c.hkv * c.d, width = c.hq * c.d;
  const std::string what = "cap " + std::to_string(c.cap) + " heads " + std::to_string(c.hq) + "/" +
                           std::to_string(c.hkv) + " d " + std::to_string(c.d) + " slot " +
                           std::to_string(c.slot) + " out " + std::to_string(c.out);
  const auto q = test::as_f32(rng.normal(static_cast<size_t>(width)));
  const auto k = test::as_f32(rng.normal(static_cast<size_t>(row)));
  const auto v = test::as_f32(rng.normal(k.size()));
  const auto cos = test::as_f32(rng.uniform(static_cast<size_t>(P * half)));
  const auto sin = test::as_f32(rng.uniform(cos.size()));
  const auto ck = test::as_f32(rng.normal(static_cast<size_t>(c.cap * row)));
  const auto cv = test::as_f32(rng.normal(ck.size()));
  std::vector<int32_t> mask(static_cast<size_t>(c.cap), 1);
  for (int64_t j = 1; j < c.cap; j += 5) mask[static_cast<size_t>(j)] = 0;  // holes
  const auto [w, wt] = half_weights(rng, c.out, width);
  ops::AttentionOptions opts;
  opts.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d)));
  opts.sliding_window = c.window;
  opts.softcap = c.softcap;
  const auto layout = c.interleaved ? ops::RopeLayout::Interleaved : ops::RopeLayout::RotateHalf;
  const Tensor slot =
      Tensor::from_host_i32(std::vector<int32_t>{static_cast<int32_t>(c.slot)}, {1});
  const Tensor mt = Tensor::from_host_i32(mask, {1, c.cap});
  const Tensor qt = test::to_gpu(q, {1, 1, c.hq, c.d}), kt = test::to_gpu(k, {1, 1, c.hkv, c.d}),
               vt = test::to_gpu(v, {1, 1, c.hkv, c.d}), cos_t = test::to_gpu(cos, {P, half}),
               sin_t = test::to_gpu(sin, {P, half}),
               pos_t = Tensor::from_host_i32(std::vector<int32_t>{static_cast<int32_t>(c.slot)},
                                             {1, 1});
  const Shape cache_shape{1, c.cap, c.hkv, c.d};
  auto fused = [&](const Tensor& cache_k, const Tensor& cache_v) {
    return ops::attention_decode_rope_o(qt, kt, vt, cos_t, sin_t, pos_t, cache_k, cache_v, slot, mt,
                                        opts, c.rot, layout, wt);
  };
  ASSERT_EQ(ops::detail::decode_attention_o_unfit(1, c.cap, c.hq, c.hkv, c.d, wt), "") << what;
  const Tensor one_k = test::to_gpu(ck, cache_shape), one_v = test::to_gpu(cv, cache_shape);
  const Tensor two_k = test::to_gpu(ck, cache_shape), two_v = test::to_gpu(cv, cache_shape);
  const Tensor partials = fused(one_k, one_v);
  const Tensor attn = ops::attention_decode_rope(qt, kt, vt, cos_t, sin_t, pos_t, two_k, two_v,
                                                 slot, mt, opts, c.rot, layout);
  test::expect_bitwise_equal(one_k, two_k, what + ": cached keys");
  test::expect_bitwise_equal(one_v, two_v, what + ": cached values");
  // Each set is one group of query heads: its partial is the projection over their columns.
  const auto plan = ops::detail::decode_attention_o_plan(c.hq, c.hkv, c.d);
  const int64_t sets = c.hkv * plan.head_groups;
  ASSERT_EQ(partials.shape(), (Shape{sets, c.out})) << what;
  const auto a = attn.to_double(), got = partials.to_double();
  const int64_t ratio = c.hq / c.hkv;
  std::vector<double> total(static_cast<size_t>(c.out), 0.0), magnitude(total.size(), 0.0);
  for (int64_t x = 0; x < sets; ++x) {
    const int64_t hk = x / plan.head_groups, hg = x % plan.head_groups;
    const int64_t h0 = hk * ratio + hg * plan.heads_per_group;
    const int64_t nh = std::min(plan.heads_per_group, ratio - hg * plan.heads_per_group);
    std::vector<double> want(static_cast<size_t>(c.out), 0.0), size(want.size(), 0.0);
    for (int64_t n = 0; n < c.out; ++n) {
      for (int64_t col = h0 * c.d; col < (h0 + nh) * c.d; ++col) {
        const double term = w[static_cast<size_t>(n * width + col)] * a[static_cast<size_t>(col)];
        want[static_cast<size_t>(n)] += term;
        size[static_cast<size_t>(n)] += std::fabs(term);
      }
    }
    for (int64_t n = 0; n < c.out; ++n) {
      const double g = got[static_cast<size_t>(x * c.out + n)];
      // fp32 sums of nh * d terms: a few units in the last place of their absolute sum.
      EXPECT_NEAR(g, want[static_cast<size_t>(n)], 1e-6 * size[static_cast<size_t>(n)] + 1e-7)
          << what << ": set " << x << " row " << n;
      total[static_cast<size_t>(n)] += want[static_cast<size_t>(n)];
      magnitude[static_cast<size_t>(n)] += size[static_cast<size_t>(n)];
    }
  }
  // Every row got a nonzero sum somewhere (a kernel that stores nothing fails here).
  EXPECT_TRUE(std::any_of(got.begin(), got.end(), [](double g) { return g != 0.0; })) << what;
  // The same inputs again: the same bits (fixed orders).
  const Tensor again_k = test::to_gpu(ck, cache_shape), again_v = test::to_gpu(cv, cache_shape);
  test::expect_bitwise_equal(fused(again_k, again_v), partials, what + ": second call");
}

TEST(DecodeFusedO, MatchesAttentionThenProjection) {
  Rng rng(61);
  const FusedOCase cases[] = {
      {40, 8, 2, 64, 64, 17, 300, 0, 0, false},     // the 1B head shape, GQA 4, many chunks
      {96, 4, 4, 32, 16, 95, 70, 20, 30.0f, true},  // GQA 1, partial rotary, window, soft-cap,
                                                    // the last slot; rows past a chunk's 16s
      {9, 6, 2, 16, 16, 0, 33, 0, 0, false},        // the first key only, GQA 3
      {12, 2, 1, 8, 8, 12, 16, 0, 0, false},        // the slot past the cache: nothing written
      {512, 4, 1, 64, 64, 300, 40, 0, 0, false},    // the longest cache the fusion takes
  };
  for (const FusedOCase& c : cases) check_fused_o(rng, c);
}

TEST(DecodeFusedO, Unfit) {
  const Tensor wt = Tensor::zeros({16, 8 * 64}, DType::F16);
  EXPECT_EQ(ops::detail::decode_attention_o_unfit(1, 96, 8, 2, 64, wt), "");
  EXPECT_NE(ops::detail::decode_attention_o_unfit(2, 96, 8, 2, 64, wt).find("rows"),
            std::string::npos);
  EXPECT_NE(ops::detail::decode_attention_o_unfit(1, 4096, 8, 2, 64, wt).find("cache"),
            std::string::npos);
  EXPECT_NE(
      ops::detail::decode_attention_o_unfit(1, 96, 8, 2, 64, Tensor::zeros({16, 512})).find("f16"),
      std::string::npos);
  ops::detail::set_decode_fuse_o(false);
  EXPECT_NE(ops::detail::decode_attention_o_unfit(1, 96, 8, 2, 64, wt).find("off"),
            std::string::npos);
  // The op itself refuses what it cannot serve, naming why.
  const Tensor cache = Tensor::zeros({1, 8, 2, 64});
  const Tensor slot = Tensor::from_host_i32(std::vector<int32_t>{3}, {1});
  ops::AttentionOptions opts;
  opts.scale = 0.125f;
  test::expect_error(
      [&] {
        ops::attention_decode_rope_o(Tensor::zeros({1, 1, 8, 64}), Tensor::zeros({1, 1, 2, 64}),
                                     Tensor::zeros({1, 1, 2, 64}), Tensor::zeros({8, 32}),
                                     Tensor::zeros({8, 32}), Tensor::zeros({1, 1}, DType::I32),
                                     cache, cache, slot, Tensor(), opts, 64,
                                     ops::RopeLayout::RotateHalf, wt);
      },
      {"attention_decode_rope_o", "turned off"});
  ops::detail::set_decode_fuse_o(true);
}

// The pending gated product: x + (partials summed in set order) as the host's fp32 arithmetic
// gives it, stored to residual_out, and the gated product of that row, bit for bit, with the row
// staged (the fused prologue) and not (the composed path).
TEST(DecodeFusedO, GatedLinearTakesPendingPartials) {
  Rng rng(62);
  const int64_t in = 512, inner = 40, sets = 8;
  const auto x = test::as_f32(rng.uniform(static_cast<size_t>(in), -2, 2));
  const auto parts = test::as_f32(rng.uniform(static_cast<size_t>(sets * in), -1, 1));
  const auto nw = test::as_f32(rng.uniform(static_cast<size_t>(in), 0.5, 1.5));
  const auto [wg, wgt] = half_weights(rng, inner, in);
  const auto [wu, wut] = half_weights(rng, inner, in);
  std::vector<float> x_new(static_cast<size_t>(in));
  for (int64_t i = 0; i < in; ++i) {
    float o = static_cast<float>(parts[static_cast<size_t>(i)]);
    for (int64_t s = 1; s < sets; ++s)
      o += static_cast<float>(parts[static_cast<size_t>(s * in + i)]);
    x_new[static_cast<size_t>(i)] = static_cast<float>(x[static_cast<size_t>(i)]) + o;
  }
  const std::vector<double> x_new_d(x_new.begin(), x_new.end());
  const ops::RowNorm norm{test::to_gpu(nw, {in}), 1e-5f, false};
  const Tensor want =
      ops::gated_linear(test::to_gpu(x_new_d, {1, 1, in}), wgt, wut, ops::Activation::SiLU, &norm);
  // And against the double reference of the same row, at fp32 tolerance.
  const auto xn = ref::rms_norm(x_new_d, nw, 1, in, 1e-5, false);
  test::expect_close(want,
                     ref::gated(ops::Activation::SiLU, ref::linear(xn, wg, {}, 1, in, inner),
                                ref::linear(xn, wu, {}, 1, in, inner)),
                     4.0 * 3.0 * in * std::ldexp(1.0, -24) + 1e-6, 1e-5, "reference");
  for (const bool staged : {true, false}) {
    ops::detail::set_skinny_f16_stage_normed(staged);
    const std::string what = staged ? "staged" : "composed";
    const Tensor residual = Tensor::empty({1, 1, in});
    const Tensor got =
        ops::gated_linear(test::to_gpu(x, {1, 1, in}), {test::to_gpu(parts, {sets, in}), residual},
                          wgt, wut, ops::Activation::SiLU, norm);
    test::expect_bitwise_equal(residual, test::to_gpu(x_new_d, {1, 1, in}), what + ": residual");
    test::expect_bitwise_equal(got, want, what + ": gated product");
  }
  ops::detail::reset_skinny_f16_settings();
  test::expect_error(
      [&] {
        const Tensor xt = Tensor::zeros({1, 1, in});
        ops::gated_linear(xt, {Tensor::zeros({sets, in + 8}), Tensor::empty({1, 1, in})}, wgt, wut,
                          ops::Activation::SiLU, norm);
      },
      {"gated_linear", "partials"});
  test::expect_error(
      [&] {
        const Tensor xt = Tensor::zeros({1, 1, in});
        ops::gated_linear(xt, {Tensor::zeros({sets, in}), xt}, wgt, wut, ops::Activation::SiLU,
                          norm);
      },
      {"gated_linear", "residual_out"});
}

// Logits of `steps` batch-1 decode steps of the llama fixture in f16 after a 5-token prompt, and
// the runner's graph size, with the fusion on or off.
struct StepRun {
  std::vector<std::vector<double>> logits;
  uint64_t dispatches = 0;
};
StepRun run_steps(models::DecoderModel& model, bool replay, int64_t steps) {
  autograd::NoGradScope no_grad;
  const std::vector<int32_t> prompt = {5, 9, 13, 21, 7};
  const int64_t plen = static_cast<int64_t>(prompt.size()), cap = plen + steps;
  auto cache = model.make_cache(1, cap);
  std::vector<int32_t> pos(prompt.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
  model.forward(Tensor::from_host_i32(prompt, {1, plen}),
                Tensor::from_host_i32(std::vector<int32_t>(prompt.size(), 1), {1, plen}), {},
                &cache, pos);
  infer::DecodeStepRunner runner(model, cache, std::vector<int32_t>(static_cast<size_t>(cap), 1),
                                 replay, false);
  StepRun r;
  for (int64_t s = 0; s < steps; ++s) {
    runner.step(std::vector<int32_t>{static_cast<int32_t>(3 + 7 * s)},
                std::vector<int32_t>{static_cast<int32_t>(plen + s)});
    const auto l = runner.logits();
    r.logits.emplace_back(l.begin(), l.end());
  }
  r.dispatches = runner.graph_dispatches();
  return r;
}

// A small Llama whose head dim (16) the fusion takes (the parity fixtures' 4 and 6 it does not),
// random weights, matrices in f16.
models::DecoderModel small_llama() {
  const nlohmann::json config = {
      {"model_type", "llama"},    {"hidden_act", "silu"},         {"rms_norm_eps", 1e-5},
      {"hidden_size", 64},        {"intermediate_size", 96},      {"num_hidden_layers", 2},
      {"num_attention_heads", 4}, {"num_key_value_heads", 2},     {"vocab_size", 80},
      {"rope_theta", 10000.0},    {"tie_word_embeddings", false}, {"attention_bias", false},
      {"mlp_bias", false},        {"max_position_embeddings", 64}};
  const models::ArchSpec spec = models::spec_from_config(config, "test config");
  Rng rng(63);
  std::map<std::string, Tensor> weights;
  for (const auto& [name, shape] : models::DecoderModel::parameter_shapes(spec)) {
    const auto v = shape.size() == 1
                       ? rng.uniform(static_cast<size_t>(shape_numel(shape)), 0.8, 1.2)
                       : rng.normal(static_cast<size_t>(shape_numel(shape)), 0.2);
    weights[name] = test::to_gpu(test::as_f32(v), shape);
  }
  models::DecoderModel model(spec, std::move(weights));
  model.convert_matrices(DType::F16);
  return model;
}

TEST(DecodeFusedO, DecodeStepWithTheFusion) {
  auto model = small_llama();
  const int64_t layers = model.spec().num_layers, steps = 4;
  ops::detail::set_decode_fuse_o(false);
  const StepRun off = run_steps(model, true, steps);
  ops::detail::set_decode_fuse_o(true);
  const StepRun on = run_steps(model, true, steps), eager = run_steps(model, false, steps);
  // The o projection's dispatch is gone from every layer.
  EXPECT_EQ(on.dispatches + static_cast<uint64_t>(layers), off.dispatches);
  for (int64_t s = 0; s < steps; ++s) {
    const auto i = static_cast<size_t>(s);
    test::expect_close(on.logits[i], off.logits[i], 2e-5, 2e-5, "step " + std::to_string(s));
    EXPECT_EQ(on.logits[i], eager.logits[i]) << "replay vs eager, step " << s;
  }
}

}  // namespace
}  // namespace vkf
