// The recorded decode step (DecoderModel::decode_step, infer::DecodeStepRunner) on every parity
// fixture model (tests/fixtures/parity): its logits follow the general forward pass with the KV
// cache for a left-padded batch; replayed steps give bitwise the logits of the same step recorded
// anew; greedy generation gives the same tokens in every decode mode with and without the device
// argmax. Weights held in f16: logits equal those of the f32 path on the same f16-rounded weights
// at fp32 tolerance, stay within f16-rounding distance of the original f32 weights, and greedy
// tokens agree; replay works with them too. Models whose rotary tables depend on the length fall
// back to the general path. A prefill computes the head on the last position only. An active
// adapter is applied by the decode step too. At batch 1 the final norm and the greedy choice fold
// into the head's product.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "infer/decode_step.h"
#include "infer/generate.h"
#include "models/decoder.h"
#include "models/registry.h"
#include "peft/lora.h"
#include "test_util.h"
#include "vk/context.h"

namespace vkf {
namespace {
namespace fs = std::filesystem;

using test::parity_cases;

models::DecoderModel load(const std::string& c, DType matrices = DType::F32) {
  return models::DecoderModel::load((test::fixtures_dir() / "parity" / c).string(), matrices);
}

// Two left-padded prompts and the tokens fed after them (teacher forcing: the same for every path).
const std::vector<std::vector<int32_t>> kPrompts = {{5, 9, 13, 21, 7, 30}, {17, 3, 11}};
const std::vector<std::vector<int32_t>> kFed = {{4, 8, 12, 16, 20, 24, 28},
                                                {1, 33, 6, 40, 2, 19, 23}};
constexpr int64_t kPromptLen = 6, kSteps = 7;

struct Batch {
  std::vector<int32_t> ids, mask, pos, next;
};
Batch left_padded() {
  Batch b;
  b.ids.assign(2 * kPromptLen, 0);
  b.mask.assign(2 * kPromptLen, 0);
  b.pos.assign(2 * kPromptLen, 1);
  for (size_t r = 0; r < 2; ++r) {
    const auto& p = kPrompts[r];
    const size_t off = kPromptLen - p.size();
    for (size_t t = 0; t < p.size(); ++t) {
      b.ids[r * kPromptLen + off + t] = p[t];
      b.mask[r * kPromptLen + off + t] = 1;
      b.pos[r * kPromptLen + off + t] = static_cast<int32_t>(t);
    }
    b.next.push_back(static_cast<int32_t>(p.size()));
  }
  return b;
}

// Logits of every decode step ([2 * vocab] each) through the general forward pass.
std::vector<std::vector<double>> generic_logits(models::DecoderModel& model) {
  autograd::NoGradScope no_grad;
  Batch b = left_padded();
  auto cache = model.make_cache(2, kPromptLen + kSteps);
  model.forward(Tensor::from_host_i32(b.ids, {2, kPromptLen}),
                Tensor::from_host_i32(b.mask, {2, kPromptLen}), {}, &cache, b.pos);
  std::vector<int32_t> mask = b.mask;
  int64_t keys = kPromptLen;
  std::vector<std::vector<double>> out;
  for (int64_t s = 0; s < kSteps; ++s) {
    std::vector<int32_t> grown;
    for (size_t r = 0; r < 2; ++r) {
      grown.insert(grown.end(), mask.begin() + static_cast<std::ptrdiff_t>(r) * keys,
                   mask.begin() + static_cast<std::ptrdiff_t>(r + 1) * keys);
      grown.push_back(1);
    }
    mask.swap(grown);
    ++keys;
    const std::vector<int32_t> ids = {kFed[0][static_cast<size_t>(s)],
                                      kFed[1][static_cast<size_t>(s)]};
    const std::vector<int32_t> pos = {b.next[0]++, b.next[1]++};
    out.push_back(model
                      .forward(Tensor::from_host_i32(ids, {2, 1}),
                               Tensor::from_host_i32(mask, {2, keys}), {}, &cache, pos)
                      .to_double());
  }
  return out;
}

// The same steps through the runner (which returns logits when device_argmax is off).
std::vector<std::vector<double>> runner_logits(models::DecoderModel& model, bool replay,
                                               bool* replayed = nullptr) {
  autograd::NoGradScope no_grad;
  Batch b = left_padded();
  const int64_t cap = kPromptLen + kSteps;
  auto cache = model.make_cache(2, cap);
  model.forward(Tensor::from_host_i32(b.ids, {2, kPromptLen}),
                Tensor::from_host_i32(b.mask, {2, kPromptLen}), {}, &cache, b.pos);
  std::vector<int32_t> slots(static_cast<size_t>(2 * cap), 1);
  for (size_t r = 0; r < 2; ++r)
    std::copy(b.mask.begin() + static_cast<std::ptrdiff_t>(r) * kPromptLen,
              b.mask.begin() + static_cast<std::ptrdiff_t>(r + 1) * kPromptLen,
              slots.begin() + static_cast<std::ptrdiff_t>(r) * cap);
  infer::DecodeStepRunner runner(model, cache, slots, replay, false);
  std::vector<std::vector<double>> out;
  for (int64_t s = 0; s < kSteps; ++s) {
    const std::vector<int32_t> ids = {kFed[0][static_cast<size_t>(s)],
                                      kFed[1][static_cast<size_t>(s)]};
    const std::vector<int32_t> pos = {b.next[0]++, b.next[1]++};
    runner.step(ids, pos);
    const auto l = runner.logits();
    out.emplace_back(l.begin(), l.end());
  }
  EXPECT_EQ(cache.length, cap);
  if (replayed) *replayed = runner.replaying();
  return out;
}

TEST(DecodeStep, FollowsTheGeneralForwardPass) {
  for (const auto& c : parity_cases()) {
    SCOPED_TRACE(c);
    auto model = load(c);
    if (!model.decode_step_unsupported().empty()) {
      EXPECT_EQ(infer::effective_decode_mode(model, infer::DecodeMode::Replay),
                infer::DecodeMode::Generic);
      continue;
    }
    const auto want = generic_logits(model);
    bool replayed = false;
    const auto eager = runner_logits(model, false);
    const auto replay = runner_logits(model, true, &replayed);
    EXPECT_TRUE(replayed) << "steps after the first replay a captured graph";
    for (int64_t s = 0; s < kSteps; ++s) {
      const auto i = static_cast<size_t>(s);
      test::expect_close(eager[i], want[i], 2e-5, 2e-5, c + " step " + std::to_string(s));
      ASSERT_EQ(replay[i].size(), eager[i].size());
      EXPECT_TRUE(std::equal(replay[i].begin(), replay[i].end(), eager[i].begin()))
          << c << " step " << s << ": the replayed step differs from the same step recorded anew";
    }
  }
}

// An active adapter is applied by the decode step as forward() applies it: LoRA on the
// projections, LoRA on the embedding, and saved copies of the final norm and the LM head
// (modules_to_save). The steps' logits follow the general forward pass with the adapter, and
// differ from those of the same model with adapters disabled.
TEST(DecodeStep, FollowsTheGeneralForwardPassWithAnAdapter) {
  for (const std::string c : {"llama_lora", "llama_embedding", "llama_save"}) {
    SCOPED_TRACE(c);
    const fs::path dir = test::fixtures_dir() / "peft" / c;
    auto model = models::DecoderModel::load(dir.string());
    model.add_adapter("default", peft::LoraAdapter::load(model, (dir / "adapter").string()));
    const auto want = generic_logits(model);
    const auto got = runner_logits(model, true);
    model.set_adapters_enabled(false);
    const auto base = runner_logits(model, true);
    double adapter_effect = 0;
    for (int64_t s = 0; s < kSteps; ++s) {
      const auto i = static_cast<size_t>(s);
      test::expect_close(got[i], want[i], 2e-5, 2e-5, c + " step " + std::to_string(s));
      adapter_effect = std::max(adapter_effect, test::max_abs_diff(base[i], want[i]));
    }
    EXPECT_GT(adapter_effect, 1e-3) << c << ": the adapter should change the logits";
  }
}

// A prefill needs the last position's logits only: the head runs on that position alone. With a
// KV cache, the cache counts the prompt's positions once.
TEST(DecodeStep, PrefillLastPositionOnly) {
  autograd::NoGradScope no_grad;
  auto model = load("llama");
  const Batch b = left_padded();
  const Tensor ids = Tensor::from_host_i32(b.ids, {2, kPromptLen}),
               mask = Tensor::from_host_i32(b.mask, {2, kPromptLen});
  const Tensor full = model.forward(ids, mask, {}, nullptr, b.pos);
  const Tensor last = model.forward(ids, mask, {}, nullptr, b.pos, true);
  EXPECT_EQ(last.shape(), (Shape{2, 1, model.spec().vocab_size}));
  test::expect_close(last, full.slice(1, kPromptLen - 1, kPromptLen).contiguous().to_double(), 1e-5,
                     1e-5, "last-position logits");
  auto cache = model.make_cache(2, kPromptLen + 1);
  const Tensor cached = model.forward(ids, mask, {}, &cache, b.pos, true);
  EXPECT_EQ(cache.length, kPromptLen);
  test::expect_close(cached, last.to_double(), 1e-5, 1e-5, "last-position logits with a cache");
}

// Greedy tokens of the fixture prompts in every mode, with the device argmax and without.
TEST(DecodeStep, GreedyTokensAgreeAcrossModes) {
  infer::GenerationConfig cfg;
  cfg.max_new_tokens = 6;
  cfg.eos_token_ids = {2};
  for (const auto& c : parity_cases()) {
    SCOPED_TRACE(c);
    auto model = load(c);
    cfg.decode_mode = infer::DecodeMode::Generic;
    cfg.device_argmax = false;
    const auto want =
        infer::generate(model, kPrompts, cfg);  // the host's choice over read-back logits
    const std::pair<infer::DecodeMode, bool> runs[] = {{infer::DecodeMode::Replay, true},
                                                       {infer::DecodeMode::Eager, false},
                                                       {infer::DecodeMode::Generic, true}};
    for (const auto& [mode, device] : runs) {
      cfg.decode_mode = mode;
      cfg.device_argmax = device;
      EXPECT_EQ(infer::generate(model, kPrompts, cfg), want)
          << c << " mode " << static_cast<int>(mode) << " device argmax " << device;
    }
  }
}

// Rotary frequencies that depend on the sequence length (dynamic NTK scaling here) cannot be
// baked into a recording: decode_step refuses, and generation falls back to the general path.
TEST(DecodeStep, LengthDependentRopeFallsBack) {
  auto base = load("llama");
  nlohmann::json config = base.spec().config;
  config.erase("rope_scaling");
  config["rope_parameters"] = {{"rope_type", "dynamic"}, {"factor", 2.0}, {"rope_theta", 10000.0}};
  config["max_position_embeddings"] =
      8;  // short, so that generation passes it and the table changes
  std::map<std::string, Tensor> params;
  for (const auto& name : base.parameter_names()) params[name] = base.param(name);
  models::DecoderModel model(models::spec_from_config(config, "dynamic-rope llama"), params);
  EXPECT_NE(model.decode_step_unsupported().find("dynamic"), std::string::npos);
  EXPECT_EQ(infer::effective_decode_mode(model, infer::DecodeMode::Replay),
            infer::DecodeMode::Generic);
  auto cache = model.make_cache(1, 4);
  models::DecodeInputs in;
  in.ids = Tensor::zeros({1, 1}, DType::I32);
  in.positions = Tensor::zeros({1, 1}, DType::I32);
  in.cached = Tensor::zeros({1}, DType::I32);
  test::expect_error(
      [&] {
        autograd::NoGradScope no_grad;
        model.decode_step(in, cache);
      },
      {"decode_step", "depend on the sequence length"});
  infer::GenerationConfig cfg;
  cfg.max_new_tokens = 6;
  cfg.decode_mode = infer::DecodeMode::Generic;
  const auto want = infer::generate(model, kPrompts, cfg);
  cfg.decode_mode = infer::DecodeMode::Replay;
  EXPECT_EQ(infer::generate(model, kPrompts, cfg), want);
}

TEST(DecodeStep, HalfPrecisionWeights) {
  for (const std::string c : {"llama", "gemma2", "phi3", "qwen3"}) {
    SCOPED_TRACE(c);
    auto f32 = load(c);
    auto f16 = load(c, DType::F16);
    EXPECT_EQ(f16.matrix_dtype(), DType::F16);
    auto rounded = load(c);  // the f32 path on the very values the f16 model holds
    rounded.convert_matrices(DType::F16);
    rounded.convert_matrices(DType::F32);
    EXPECT_EQ(rounded.matrix_dtype(), DType::F32);
    // The general path (prefill kernels) and the decode step.
    const auto want_exact = generic_logits(rounded), want_f32 = generic_logits(f32);
    for (const bool replay : {false, true}) {
      const auto got =
          f16.decode_step_unsupported().empty() ? runner_logits(f16, replay) : generic_logits(f16);
      double worst = 0, scale = 0;
      for (int64_t s = 0; s < kSteps; ++s) {
        const auto i = static_cast<size_t>(s);
        test::expect_close(got[i], want_exact[i], 2e-5, 2e-5,
                           c + " f16 vs f32 on f16 values, step " + std::to_string(s));
        worst = std::max(worst, test::max_abs_diff(got[i], want_f32[i]));
        for (double v : want_f32[i]) scale = std::max(scale, std::fabs(v));
      }
      // Rounding every weight to 11 significant bits moves the logits by a small fraction of
      // their size (a broken f16 path is off by their whole size).
      EXPECT_LT(worst, 0.02 * scale + 1e-4) << c << ": f16 logits vs the f32 model's";
      EXPECT_GT(worst, 0.0) << c << ": f16 weights changed nothing (are they f16?)";
    }
    infer::GenerationConfig cfg;
    cfg.max_new_tokens = 8;
    EXPECT_EQ(infer::generate(f16, kPrompts, cfg), infer::generate(rounded, kPrompts, cfg)) << c;
  }
}

// One row through the replayed runner: the logits of every fed token, and the graph's dispatches.
std::vector<std::vector<double>> single_row_logits(models::DecoderModel& model,
                                                   uint64_t& dispatches) {
  autograd::NoGradScope no_grad;
  const std::vector<int32_t>& prompt = kPrompts[0];
  const auto L = static_cast<int64_t>(prompt.size());
  auto cache = model.make_cache(1, L + kSteps);
  std::vector<int32_t> pos(prompt.size());
  for (size_t t = 0; t < pos.size(); ++t) pos[t] = static_cast<int32_t>(t);
  model.forward(Tensor::from_host_i32(prompt, {1, L}),
                Tensor::from_host_i32(std::vector<int32_t>(prompt.size(), 1), {1, L}), {}, &cache,
                pos);
  infer::DecodeStepRunner runner(
      model, cache, std::vector<int32_t>(static_cast<size_t>(L + kSteps), 1), true, false);
  std::vector<std::vector<double>> out;
  for (int64_t s = 0; s < kSteps; ++s) {
    runner.step(std::vector<int32_t>{kFed[0][static_cast<size_t>(s)]},
                std::vector<int32_t>{static_cast<int32_t>(L + s)});
    const auto l = runner.logits();
    out.emplace_back(l.begin(), l.end());
  }
  dispatches = runner.graph_dispatches();
  return out;
}

// At batch 1 with f16 weights the final RMSNorm folds into the head's product: one dispatch fewer
// than the norm followed by the head, and the same logits up to the products' summation order
// (gemma2: norm weight 1 + w, a scaled embedding and a soft-capped head after the fold).
TEST(DecodeStep, FinalNormFoldsIntoTheHead) {
  struct Restore {
    ~Restore() { models::DecoderModel::set_decode_head_norm_fold(true); }
  } restore;
  for (const std::string c : {"llama", "gemma2"}) {
    SCOPED_TRACE(c);
    auto f16 = load(c, DType::F16);
    uint64_t folded_dispatches = 0, plain_dispatches = 0;
    const auto folded = single_row_logits(f16, folded_dispatches);
    models::DecoderModel::set_decode_head_norm_fold(false);
    const auto plain = single_row_logits(f16, plain_dispatches);
    models::DecoderModel::set_decode_head_norm_fold(true);
    EXPECT_EQ(folded_dispatches + 1, plain_dispatches) << c << ": the norm's own dispatch";
    for (int64_t s = 0; s < kSteps; ++s) {
      const auto i = static_cast<size_t>(s);
      test::expect_close(folded[i], plain[i], 2e-5, 2e-5,
                         c + " folded vs separate final norm, step " + std::to_string(s));
    }
  }
}

// At batch 1 the greedy token comes from the head's own product (ops::normed_linear_argmax, after
// the final norm's fold): one dispatch fewer than argmax_rows over the logits, whose values stay
// the same, so the same tokens as with argmax_rows; and where the device has 64-bit atomics, the
// final fold and the step's advance inside the head's dispatch, one dispatch fewer again.
TEST(DecodeStep, GreedyChoiceFoldsIntoTheHead) {
  struct Restore {
    ~Restore() {
      models::DecoderModel::set_decode_head_argmax_fold(true);
      ops::set_argmax_fold_in_product(true);
    }
  } restore;
  const bool in_dispatch = vk::Context::get().info().int64_atomics;
  const std::vector<std::vector<int32_t>> one_row = {kPrompts[0]};
  infer::GenerationConfig cfg;
  cfg.max_new_tokens = kSteps;
  for (const std::string c : {"llama", "qwen3"}) {
    SCOPED_TRACE(c);
    auto f16 = load(c, DType::F16);
    auto dispatches = [&] {  // of a replayed batch-1 step with the device argmax
      autograd::NoGradScope no_grad;
      auto cache = f16.make_cache(1, 4);
      infer::DecodeStepRunner runner(f16, cache, std::vector<int32_t>(4, 1), true, true);
      for (int32_t s = 0; s < 2; ++s)
        runner.step(std::vector<int32_t>{kFed[0][0]}, std::vector<int32_t>{s});
      EXPECT_TRUE(runner.replaying());
      return runner.graph_dispatches();
    };
    const auto in_head = infer::generate(f16, one_row, cfg);
    const uint64_t in_head_dispatches = dispatches();
    ops::set_argmax_fold_in_product(false);
    const auto folded = infer::generate(f16, one_row, cfg);
    const uint64_t folded_dispatches = dispatches();
    models::DecoderModel::set_decode_head_argmax_fold(false);
    const auto separate = infer::generate(f16, one_row, cfg);
    const uint64_t separate_dispatches = dispatches();
    models::DecoderModel::set_decode_head_argmax_fold(true);
    ops::set_argmax_fold_in_product(true);
    EXPECT_EQ(folded, separate) << c;
    EXPECT_EQ(in_head, separate) << c;
    EXPECT_EQ(folded_dispatches + 1, separate_dispatches) << c << ": argmax_rows' first pass";
    EXPECT_EQ(in_head_dispatches + (in_dispatch ? 1 : 0), folded_dispatches)
        << c << ": argmax_rows' final pass";
  }
}

// At batch 1 with an f16 table, the step's first products read the token's embedding row
// themselves (ops::normed_linear_of_embedding): one dispatch fewer, and the same logits bit for
// bit (the same row, the same sums) and tokens as with the embedding's own dispatch.
TEST(DecodeStep, EmbeddingFoldsIntoTheFirstProducts) {
  struct Restore {
    ~Restore() { ops::set_embedding_fold(true); }
  } restore;
  const std::vector<std::vector<int32_t>> one_row = {kPrompts[0]};
  infer::GenerationConfig cfg;
  cfg.max_new_tokens = kSteps;
  for (const std::string c : {"llama", "qwen3"}) {
    SCOPED_TRACE(c);
    auto f16 = load(c, DType::F16);
    // A replayed step's dispatches and logits, token kFed[0][0] at position 5 after 5 fed ones.
    auto step = [&](uint64_t& dispatches) {
      autograd::NoGradScope no_grad;
      auto cache = f16.make_cache(1, 8);
      infer::DecodeStepRunner runner(f16, cache, std::vector<int32_t>(8, 1), true, false);
      for (int32_t s = 0; s < 6; ++s)
        runner.step(std::vector<int32_t>{kFed[0][static_cast<size_t>(s) % kFed[0].size()]},
                    std::vector<int32_t>{s});
      EXPECT_TRUE(runner.replaying());
      dispatches = runner.graph_dispatches();
      const auto l = runner.logits();
      return std::vector<float>(l.begin(), l.end());
    };
    uint64_t folded_dispatches = 0, separate_dispatches = 0;
    const auto folded_tokens = infer::generate(f16, one_row, cfg);
    const auto folded = step(folded_dispatches);
    ops::set_embedding_fold(false);
    const auto separate_tokens = infer::generate(f16, one_row, cfg);
    const auto separate = step(separate_dispatches);
    ops::set_embedding_fold(true);
    EXPECT_EQ(folded_tokens, separate_tokens);
    EXPECT_EQ(folded, separate) << "the logits, bit for bit";
    EXPECT_EQ(folded_dispatches + 1, separate_dispatches) << "the embedding's dispatch";
  }
  // An f32 table (not an inference model) takes the embedding's dispatch.
  auto f32 = load("llama", DType::F32);
  EXPECT_FALSE(f32.decode_embedded_input(Tensor::zeros({1, 1}, DType::I32)).table.defined());
}

TEST(DecodeStep, HalfPrecisionLoadAndSave) {
  const std::string dir = (test::fixtures_dir() / "parity" / "llama").string();
  EXPECT_EQ(models::DecoderModel::checkpoint_matrix_dtype(dir), DType::F32);  // an f32 checkpoint
  auto f16 = load("llama", DType::F16);
  for (const auto& name : f16.parameter_names())
    EXPECT_EQ(f16.param(name).dtype(), f16.param(name).rank() == 2 ? DType::F16 : DType::F32)
        << name;
  test::expect_error([&] { f16.set_requires_grad(true); }, {"f16", "inference", "f32"});
  const fs::path out = fs::temp_directory_path() / "vkf_test_f16_save";
  fs::remove_all(out);
  f16.save(out.string());
  EXPECT_EQ(models::DecoderModel::checkpoint_matrix_dtype(out.string()), DType::F16);
  auto back = models::DecoderModel::load(out.string(), DType::F16);
  for (const auto& name : f16.parameter_names())
    EXPECT_EQ(back.param(name).to_bytes(), f16.param(name).to_bytes()) << name;
  fs::remove_all(out);
  test::expect_error([&] { models::DecoderModel::load(dir, DType::I32); }, {"f32 or f16"});
}

}  // namespace
}  // namespace vkf
