// Activation checkpointing and training dropout in the decoder. autograd::checkpoint on a small
// function gives gradients bitwise equal to plain recording, replays dropout masks, and leaves the
// dropout stream where the plain forward does; DecoderModel with gradient checkpointing gives
// bitwise the same gradients as without, on a llama and on starcoder2/phi3/stablelm models with
// every dropout of theirs on (masks replayed in the recomputation); the peak of live tensor memory
// is lower with it. Dropout placement follows transformers: at p = 1 the dropped block outputs
// vanish from the residual stream, and without an active stream dropout is off.
#include <cmath>
#include <map>

#include "core/activation_checkpoint.h"
#include "core/autograd.h"
#include "core/dropout_rng.h"
#include "models/decoder.h"
#include "models/registry.h"
#include "nn/linear.h"
#include "ops/activation.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "test_util.h"
#include "train/causal_lm.h"
#include "vk/context.h"
#include "vk/error.h"

namespace vkf {
namespace {
using nlohmann::json;

// ---- autograd::checkpoint on a small function ----

struct Fn {
  Tensor w1, w2;
  // Two projections with an activation and dropout between them; two outputs.
  std::vector<Tensor> operator()(const std::vector<Tensor>& in) const {
    Tensor h = ops::train_dropout(ops::silu(nn::linear("a", in[0], w1)), 0.3f);
    Tensor y = nn::linear("b", h, w2);
    return {y, ops::train_dropout(h, 0.5f)};
  }
};

TEST(Checkpoint, GradientsAndDropoutMatchPlainRecording) {
  test::Rng rng(1);
  Tensor w1 = test::to_gpu(rng.normal(12 * 8, 0.5), {12, 8}).set_requires_grad(true);
  Tensor w2 = test::to_gpu(rng.normal(5 * 12, 0.5), {5, 12}).set_requires_grad(true);
  Tensor x = test::to_gpu(rng.normal(3 * 7 * 8), {3, 7, 8}).set_requires_grad(true);
  const Tensor seed0 = test::to_gpu(rng.normal(3 * 7 * 5), {3, 7, 5});
  const Tensor seed1 = test::to_gpu(rng.normal(3 * 7 * 12), {3, 7, 12});
  const Fn fn{w1, w2};
  std::vector<Tensor> results[2];
  uint64_t offsets[2];
  for (int mode = 0; mode < 2; ++mode) {
    for (Tensor* t : {&w1, &w2, &x}) t->zero_grad();
    dropout_rng::Stream stream{77, 5};
    autograd::Tape tape;
    std::vector<Tensor> out;
    {
      autograd::TapeScope scope(tape);
      dropout_rng::StreamScope dropout(&stream);
      // x * 2 first, so the checkpointed function's input is an intermediate of the tape.
      const Tensor xin = ops::scale(x, 2.0f);
      out = mode == 0 ? fn({xin}) : autograd::checkpoint(fn, {xin});
    }
    offsets[mode] = stream.offset;
    tape.backward(out, {seed0, seed1});
    results[mode] = {out[0], out[1], w1.grad(), w2.grad(), x.grad()};
  }
  EXPECT_EQ(offsets[0], offsets[1]);
  EXPECT_EQ(offsets[0], 5u + 3 * 7 * 12 * 2);
  const char* what[] = {"y", "h", "dw1", "dw2", "dx"};
  for (size_t i = 0; i < 5; ++i) test::expect_bitwise_equal(results[1][i], results[0][i], what[i]);
}

TEST(Checkpoint, PlainCallWithoutTapeAndBadFunctions) {
  Tensor x = Tensor::full({4}, 2.0f).set_requires_grad(true);
  const auto out = autograd::checkpoint(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::silu(in[0])}; }, {x});
  EXPECT_FALSE(out[0].requires_grad());  // no tape: nothing recorded
  autograd::Tape tape;
  autograd::TapeScope scope(tape);
  test::expect_error(
      [&] { autograd::checkpoint([](const std::vector<Tensor>& in) { return in; }, {x}); },
      {"checkpoint", "one of its inputs"});
}

// ---- the decoder ----

json config_of(const std::string& type) {
  json c = {{"model_type", type},       {"vocab_size", 40},
            {"hidden_size", 32},        {"intermediate_size", 48},
            {"num_hidden_layers", 3},   {"num_attention_heads", 4},
            {"num_key_value_heads", 2}, {"max_position_embeddings", 128}};
  if (type == "starcoder2") {
    c["attention_dropout"] = 0.2;
    c["residual_dropout"] = 0.1;
    c["embedding_dropout"] = 0.15;
  } else if (type == "phi3") {
    c["attention_dropout"] = 0.1;
    c["resid_pdrop"] = 0.2;
  } else if (type == "stablelm") {
    c["attention_dropout"] = 0.25;
    c["hidden_dropout"] = 0.3;
    c["use_parallel_residual"] = true;
  }
  return c;
}

models::DecoderModel make_model(const json& config, uint64_t seed = 3) {
  auto spec = models::spec_from_config(config, "config.json");
  test::Rng rng(seed);
  std::map<std::string, Tensor> params;
  for (const auto& [name, shape] : models::DecoderModel::parameter_shapes(spec)) {
    auto v = rng.normal(static_cast<size_t>(shape_numel(shape)), 0.2);
    if (name.find("norm.weight") != std::string::npos)
      for (auto& e : v) e += 1.0;
    params[name] = test::to_gpu(v, shape);
  }
  models::DecoderModel m(std::move(spec), std::move(params));
  m.set_requires_grad(true);
  return m;
}

struct Batch {
  Tensor ids, mask;
  std::vector<int64_t> labels;
};

Batch make_batch(int64_t b, int64_t t, int64_t vocab, uint64_t seed) {
  test::Rng rng(seed);
  std::vector<int64_t> ids(static_cast<size_t>(b * t)), mask(ids.size(), 1);
  for (auto& v : ids) v = rng.ints(1, 0, static_cast<int32_t>(vocab - 1))[0];
  std::vector<int64_t> labels = ids;
  for (int64_t j = t - 3; j < t; ++j) {  // right padding in the last row
    mask[static_cast<size_t>((b - 1) * t + j)] = 0;
    labels[static_cast<size_t>((b - 1) * t + j)] = -100;
  }
  return {Tensor::from_host_i64(ids, {b, t}), Tensor::from_host_i64(mask, {b, t}), labels};
}

struct StepResult {
  Tensor loss;
  std::vector<Tensor> grads;
  uint64_t offset_after = 0;
};

// Forward + backward; with `stream` given, dropout is on (a copy of it is used).
StepResult train_step(models::DecoderModel& m, const Batch& b, const dropout_rng::Stream* stream) {
  for (const auto& t : m.parameters()) t.zero_grad();
  dropout_rng::Stream s = stream ? *stream : dropout_rng::Stream{};
  autograd::Tape tape;
  StepResult r;
  {
    autograd::TapeScope scope(tape);
    dropout_rng::StreamScope dropout(stream ? &s : nullptr);
    r.loss = train::causal_lm_loss(m.forward(b.ids, b.mask), b.labels);
  }
  r.offset_after = s.offset;
  tape.backward(r.loss);
  for (const auto& name : m.parameter_names()) r.grads.push_back(m.param(name).grad());
  return r;
}

void expect_same_run(const StepResult& a, const StepResult& b, const models::DecoderModel& m) {
  test::expect_bitwise_equal(a.loss, b.loss, "loss");
  EXPECT_EQ(a.offset_after, b.offset_after);
  for (size_t i = 0; i < a.grads.size(); ++i) {
    ASSERT_TRUE(a.grads[i].defined() && b.grads[i].defined()) << m.parameter_names()[i];
    test::expect_bitwise_equal(a.grads[i], b.grads[i], "grad." + m.parameter_names()[i]);
  }
}

TEST(DecoderCheckpointing, LlamaGradientsAreBitwiseIdentical) {
  auto m = make_model(config_of("llama"));
  const Batch b = make_batch(2, 13, 40, 9);
  const StepResult plain = train_step(m, b, nullptr);
  m.set_gradient_checkpointing(true);
  const StepResult ckpt = train_step(m, b, nullptr);
  expect_same_run(plain, ckpt, m);
}

TEST(DecoderCheckpointing, DropoutMasksReplayInTheRecomputation) {
  for (const char* type : {"starcoder2", "phi3", "stablelm"}) {
    SCOPED_TRACE(type);
    auto m = make_model(config_of(type));
    const Batch b = make_batch(2, 11, 40, 10);
    const dropout_rng::Stream stream{0xabcdef12345ull, 1000};
    const StepResult plain = train_step(m, b, &stream);
    const StepResult off = train_step(m, b, nullptr);
    EXPECT_NE(plain.loss.item(), off.loss.item()) << "dropout had no effect";
    EXPECT_GT(plain.offset_after, stream.offset);
    m.set_gradient_checkpointing(true);
    const StepResult ckpt = train_step(m, b, &stream);
    expect_same_run(plain, ckpt, m);
    // Without a stream (evaluation) checkpointing changes nothing either.
    expect_same_run(off, train_step(m, b, nullptr), m);
  }
}

TEST(DecoderCheckpointing, PeakLiveMemoryIsLower) {
  json c = config_of("llama");
  c["num_hidden_layers"] = 6;
  c["hidden_size"] = 64;
  c["intermediate_size"] = 128;
  auto m = make_model(c);
  const Batch b = make_batch(2, 96, 40, 11);
  uint64_t peak[2];
  for (int mode = 0; mode < 2; ++mode) {
    m.set_gradient_checkpointing(mode == 1);
    for (const auto& t : m.parameters()) t.zero_grad();
    vk::reset_memory_peak();
    const uint64_t base = vk::memory_stats().live_bytes;
    train_step(m, b, nullptr);
    peak[mode] = vk::memory_stats().peak_live_bytes - base;
  }
  // The plain forward keeps every layer's activations until the backward pass; checkpointing keeps
  // one [B, T, H] input per layer plus one layer's activations at a time.
  EXPECT_LT(static_cast<double>(peak[1]), 0.6 * static_cast<double>(peak[0]))
      << "peak live bytes: plain " << peak[0] << ", checkpointed " << peak[1];
}

// Dropout placement, checked at p = 1 through the trace: what transformers drops vanishes from
// the residual stream.
TEST(DecoderDropout, PlacementFollowsTransformers) {
  const Batch b = make_batch(2, 9, 40, 12);
  std::map<std::string, Tensor> seen;
  const models::Trace trace = [&](const std::string& name, const Tensor& t) {
    seen[name] = t.contiguous();
  };
  const dropout_rng::Stream stream{5, 0};
  auto forward = [&](models::DecoderModel& m) {
    seen.clear();
    autograd::NoGradScope no_grad;
    dropout_rng::Stream s = stream;
    dropout_rng::StreamScope on(&s);
    m.forward(b.ids, b.mask, trace);
  };
  {  // starcoder2: residual_dropout drops both block outputs, embedding_dropout the embedding.
    json c = config_of("starcoder2");
    c["residual_dropout"] = 1.0;
    c["embedding_dropout"] = 1.0;
    auto m = make_model(c);
    forward(m);
    for (double v : seen["embed"].to_double()) ASSERT_EQ(v, 0.0);
    test::expect_bitwise_equal(seen["layers.2.out"], seen["embed"], "starcoder2 residual stream");
  }
  {  // phi3: resid_pdrop drops both block outputs.
    json c = config_of("phi3");
    c["resid_pdrop"] = 1.0;
    auto m = make_model(c);
    forward(m);
    test::expect_bitwise_equal(seen["layers.0.attn_residual"], seen["embed"],
                               "phi3 attention output");
    test::expect_bitwise_equal(seen["layers.2.out"], seen["embed"], "phi3 residual stream");
  }
  {  // stablelm: hidden_dropout drops the MLP output only.
    json c = config_of("stablelm");
    c["use_parallel_residual"] = false;
    c["hidden_dropout"] = 1.0;
    auto m = make_model(c);
    forward(m);
    test::expect_bitwise_equal(seen["layers.0.out"], seen["layers.0.attn_residual"],
                               "stablelm MLP output");
    EXPECT_GT(
        test::max_abs_diff(seen["layers.0.attn_residual"].to_double(), seen["embed"].to_double()),
        1e-3);
  }
  {  // attention_dropout = 1 zeroes the attention context.
    json c = config_of("llama");
    c["attention_dropout"] = 1.0;
    auto m = make_model(c);
    forward(m);
    for (double v : seen["layers.1.attn.context"].to_double()) ASSERT_EQ(v, 0.0);
  }
}

TEST(DecoderDropout, OffWithoutAStreamAndConfigErrors) {
  const Batch b = make_batch(2, 9, 40, 13);
  auto with = make_model(config_of("starcoder2"));
  json c = config_of("starcoder2");
  c["attention_dropout"] = c["residual_dropout"] = c["embedding_dropout"] = 0.0;
  auto without = make_model(c);
  autograd::NoGradScope no_grad;
  test::expect_bitwise_equal(with.forward(b.ids, b.mask), without.forward(b.ids, b.mask),
                             "no stream: dropout off");
  const Tensor reference = without.forward(b.ids, b.mask);
  dropout_rng::Stream s{1, 0};
  {
    dropout_rng::StreamScope on(&s);
    test::expect_bitwise_equal(without.forward(b.ids, b.mask), reference, "zero probabilities");
    EXPECT_EQ(s.offset, 0u);  // and nothing is drawn
    EXPECT_GT(test::max_abs_diff(with.forward(b.ids, b.mask).to_double(), reference.to_double()),
              1e-4);
    EXPECT_GT(s.offset, 0u);
  }
  json bad = config_of("llama");
  bad["attention_dropout"] = 1.5;
  test::expect_error([&] { models::spec_from_config(bad, "config.json"); },
                     {"config.json", "attention_dropout", "[0, 1]", "1.5"});
  bad = config_of("starcoder2");
  bad["residual_dropout"] = -0.1;
  test::expect_error([&] { models::spec_from_config(bad, "config.json"); },
                     {"residual_dropout", "[0, 1]"});
}

}  // namespace
}  // namespace vkf
