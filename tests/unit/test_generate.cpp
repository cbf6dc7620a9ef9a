// Generation: incremental decoding with the KV cache gives the logits of a full forward pass
// (every model type, sliding windows included), greedy tokens equal transformers' generate() on
// the parity fixture models (tests/fixtures/generate/greedy.json, tools/oracle/generate_fixtures.py),
// and the sampling processors (temperature, top-k, top-p, min-p, repetition penalty) behave.
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/autograd.h"
#include "infer/generate.h"
#include "models/decoder.h"
#include "test_util.h"
#include "vk/error.h"

namespace vkf {
namespace {
namespace fs = std::filesystem;

using test::parity_cases;


TEST(Generate, CachedDecodingMatchesFullForward) {
  autograd::NoGradScope no_grad;
  const std::vector<int32_t> seq = {5, 9, 13, 21, 7, 30, 17, 3, 11, 4, 8};  // longer than windows
  for (const auto& c : parity_cases()) {
    SCOPED_TRACE(c);
    auto model = models::DecoderModel::load((test::fixtures_dir() / "parity" / c).string());
    const int64_t n = static_cast<int64_t>(seq.size()), V = model.spec().vocab_size;
    const auto full = model.forward(Tensor::from_host_i32(seq, {1, n}), {}).to_double();
    auto cache = model.make_cache(1, n);
    const int64_t prefill = 4;
    std::vector<int32_t> head(seq.begin(), seq.begin() + prefill);
    std::vector<int32_t> ones(static_cast<size_t>(prefill), 1);
    std::vector<double> got = model.forward(Tensor::from_host_i32(head, {1, prefill}),
                                            Tensor::from_host_i32(ones, {1, prefill}), {}, &cache)
                                  .to_double();
    for (int64_t t = prefill; t < n; ++t) {
      ones.push_back(1);
      const auto step = model.forward(Tensor::from_host_i32(std::vector<int32_t>{seq[t]}, {1, 1}),
                                      Tensor::from_host_i32(ones, {1, t + 1}), {}, &cache)
                            .to_double();
      got.insert(got.end(), step.begin(), step.end());
    }
    ASSERT_EQ(got.size(), static_cast<size_t>(n * V));
    test::expect_close(got, full, 2e-5, 2e-5, c + " cached logits");
  }
}

TEST(Generate, GreedyMatchesTransformers) {
  std::ifstream in(test::fixtures_dir() / "generate" / "greedy.json");
  ASSERT_TRUE(in) << "missing tests/fixtures/generate/greedy.json";
  const auto j = nlohmann::json::parse(in);
  const auto prompts = j["prompts"].get<std::vector<std::vector<int32_t>>>();
  infer::GenerationConfig cfg;
  cfg.max_new_tokens = j["max_new_tokens"].get<int64_t>();
  cfg.pad_token_id = j["pad_token_id"].get<int32_t>();
  cfg.eos_token_ids = {j["eos_token_id"].get<int32_t>()};
  size_t rows = 0, mismatched = 0;
  for (auto& [c, expect] : j["cases"].items()) {
    SCOPED_TRACE(c);
    auto model = models::DecoderModel::load((test::fixtures_dir() / "parity" / c).string());
    const auto batch = infer::generate(model, prompts, cfg);
    const auto single = infer::generate(model, {prompts[0]}, cfg);
    const auto want_batch = expect["batch"].get<std::vector<std::vector<int32_t>>>();
    const auto want_single = expect["single"].get<std::vector<std::vector<int32_t>>>();
    EXPECT_EQ(batch, want_batch);
    EXPECT_EQ(single, want_single);
    rows += 3;
    mismatched += (batch[0] != want_batch[0]) + (batch[1] != want_batch[1]) + (single != want_single);
  }
  std::printf("greedy generation: %zu sequences from %zu model types, %zu differ from transformers\n",
              rows, j["cases"].size(), mismatched);
}

TEST(Generate, SamplingProcessors) {
  infer::GenerationConfig c;
  c.do_sample = true;
  c.top_k = 0;
  uint64_t rng = 42;
  // top-k 1 and min-p 1 both reduce to the argmax.
  std::vector<float> logits = {0.1f, 2.0f, 1.9f, -3.0f};
  c.top_k = 1;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(infer::choose_token(logits, {}, c, rng), 1);
  c.top_k = 0;
  c.min_p = 1.0;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(infer::choose_token(logits, {}, c, rng), 1);
  c.min_p = 0;
  // top-p 0.5 keeps only the two leading tokens here (p = 0.46, 0.42, ...).
  c.top_p = 0.5;
  for (int i = 0; i < 200; ++i) {
    const int32_t t = infer::choose_token(logits, {}, c, rng);
    EXPECT_TRUE(t == 1 || t == 2) << t;
  }
  // Frequencies follow the softmax at temperature 2 (chi-square-free loose check).
  c.top_p = 1.0;
  c.temperature = 2.0;
  std::vector<int> count(4, 0);
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) ++count[static_cast<size_t>(infer::choose_token(logits, {}, c, rng))];
  double z = 0;
  std::vector<double> p(4);
  for (size_t i = 0; i < 4; ++i) z += p[i] = std::exp(logits[i] / 2.0);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(count[i] / static_cast<double>(draws), p[i] / z, 0.015) << i;
  // Repetition penalty: a seen positive logit is divided, a negative one multiplied.
  infer::GenerationConfig g;
  g.repetition_penalty = 2.0;
  EXPECT_EQ(infer::choose_token({3.0f, 2.0f, -1.0f}, {0}, g, rng), 1);  // 3/2 = 1.5 < 2
  // The same seed gives the same samples.
  uint64_t a = 7, b = 7;
  c.temperature = 1.0;
  for (int i = 0; i < 50; ++i) EXPECT_EQ(infer::choose_token(logits, {}, c, a), infer::choose_token(logits, {}, c, b));
}

TEST(Generate, BadInput) {
  auto model = models::DecoderModel::load((test::fixtures_dir() / "parity" / "llama").string());
  infer::GenerationConfig cfg;
  test::expect_error([&] { infer::generate(model, {}, cfg); }, {"no prompts"});
  test::expect_error([&] { infer::generate(model, {{}}, cfg); }, {"empty prompt"});
  test::expect_error([&] { infer::generate(model, {{1, 999}}, cfg); }, {"999", "vocabulary"});
  auto cache = model.make_cache(1, 2);
  test::expect_error([&] {
    autograd::NoGradScope ng;
    model.forward(Tensor::from_host_i32(std::vector<int32_t>{1, 2, 3}, {1, 3}), {}, {}, &cache);
  }, {"KV cache", "3 positions"});
}

}  // namespace
}  // namespace vkf
