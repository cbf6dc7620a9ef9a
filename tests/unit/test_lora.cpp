// LoRA (src/peft) and LoRA training (src/train): peft's module-matching rules on hand-made names
// and against the modules peft 0.21 itself adapted in every tests/fixtures/peft case, the
// initializations' statistics, the adapter file round trip, the forward against a double
// reference and the loss gradient against finite differences, the trainer's promise that base
// weights stay bitwise unchanged while only adapter tensors learn (and are clipped), and the
// --peft-budget rank search against counts worked out by hand.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/autograd.h"
#include "io/safetensors.h"
#include "models/decoder.h"
#include "peft/budget.h"
#include "peft/lora.h"
#include "test_util.h"
#include "train/causal_lm.h"
#include "train/trainer.h"
#include "vk/error.h"

namespace vkf {
namespace {
namespace fs = std::filesystem;
using nlohmann::ordered_json;

const fs::path kFixtures = fs::path(__FILE__).parent_path().parent_path() / "fixtures";
// A tiny Llama made by transformers: hidden 16, 4 heads x 6 (q 24 wide), 2 kv heads (k/v 12 wide),
// MLP 24, vocab 48, 2 layers, untied head.
const fs::path kLlama = kFixtures / "parity" / "llama";

peft::LoraConfig config(const ordered_json& j) { return peft::LoraConfig::from_json(j, "test config"); }

const std::string kQ0 = "model.layers.0.self_attn.q_proj", kQ1 = "model.layers.1.self_attn.q_proj";
const std::string kV0 = "model.layers.0.self_attn.v_proj", kDown1 = "model.layers.1.mlp.down_proj";

// ---------------------------------------------------------------- matching rules (no device)

TEST(LoraConfig, ListEntriesMatchTheWholeNameOrASuffixAfterADot) {
  const auto c = config({{"target_modules", {"q_proj", "mlp.up_proj"}}});
  EXPECT_TRUE(c.targets(kQ0, false));
  EXPECT_TRUE(c.targets("q_proj", false));
  EXPECT_TRUE(c.targets("model.layers.0.mlp.up_proj", false));
  EXPECT_FALSE(c.targets("model.layers.0.self_attn.xq_proj", false));  // not at a dot
  EXPECT_FALSE(c.targets("model.layers.0.self_attn.q_proj_extra", false));
  EXPECT_FALSE(c.targets("model.layers.0.xmlp.up_proj", false));
  EXPECT_FALSE(c.targets(kV0, false));
}

TEST(LoraConfig, AStringIsARegexThatMustMatchTheWholeName) {
  EXPECT_FALSE(config({{"target_modules", "q_proj"}}).targets(kQ0, false));  // a regex, not a suffix
  EXPECT_TRUE(config({{"target_modules", "q_proj"}}).targets("q_proj", false));
  const auto c = config({{"target_modules", R"(.*\.layers\.1\..*(q|v)_proj)"}});
  EXPECT_TRUE(c.targets(kQ1, false));
  EXPECT_TRUE(c.targets("model.layers.1.self_attn.v_proj", false));
  EXPECT_FALSE(c.targets(kQ0, false));
  EXPECT_FALSE(c.targets("model.layers.1.self_attn.k_proj", false));
  EXPECT_FALSE(config({{"target_modules", "layers"}}).targets(kQ0, false));  // a partial match is none
}

TEST(LoraConfig, AllLinearLeavesOutTheOutputHead) {
  const auto c = config({{"target_modules", "all-linear"}});
  EXPECT_TRUE(c.all_linear);
  EXPECT_TRUE(c.targets(kDown1, false));
  EXPECT_FALSE(c.targets("lm_head", true));
}

TEST(LoraConfig, ExcludeModulesWinOverTargets) {
  const auto list = config({{"target_modules", "all-linear"}, {"exclude_modules", {"layers.0.self_attn.q_proj"}}});
  EXPECT_FALSE(list.targets(kQ0, false));
  EXPECT_TRUE(list.targets(kQ1, false));
  const auto re = config({{"target_modules", {"q_proj", "down_proj"}}, {"exclude_modules", ".*down_proj"}});
  EXPECT_FALSE(re.targets(kDown1, false));
  EXPECT_TRUE(re.targets(kQ1, false));
}

TEST(LoraConfig, LayersToTransformWithAndWithoutALayersPattern) {
  const auto any = config({{"target_modules", {"q_proj", "embed_tokens"}}, {"layers_to_transform", {1}}});
  EXPECT_TRUE(any.targets(kQ1, false));
  EXPECT_FALSE(any.targets(kQ0, false));
  EXPECT_FALSE(any.targets("model.embed_tokens", false));  // no layer index: not transformed
  const auto layers = config({{"target_modules", {"q_proj"}}, {"layers_to_transform", 1}, {"layers_pattern", "layers"}});
  EXPECT_TRUE(layers.targets(kQ1, false));
  EXPECT_FALSE(layers.targets(kQ0, false));
  // The pattern names the list the index follows: "h" is not in these names, so nothing matches.
  const auto other = config({{"target_modules", {"q_proj"}}, {"layers_to_transform", {0, 1}}, {"layers_pattern", "h"}});
  EXPECT_FALSE(other.targets(kQ0, false));
  EXPECT_FALSE(other.targets(kQ1, false));
  EXPECT_TRUE(other.targets("transformer.h.1.attn.q_proj", false));
}

TEST(LoraConfig, RankAndAlphaPatternsTakeTheFirstMatchingKey) {
  ordered_json ranks = ordered_json::object();
  ranks["layers.0.self_attn.q_proj"] = 2;
  ranks["q_proj"] = 5;
  ranks["proj"] = 7;  // must end the name at a dot boundary: matches no "*_proj"
  ordered_json alphas = ordered_json::object();
  alphas["v_proj"] = 3;
  const auto c = config({{"r", 4}, {"lora_alpha", 8}, {"target_modules", "all-linear"}, {"rank_pattern", ranks},
                         {"alpha_pattern", alphas}});
  EXPECT_EQ(c.rank_for(kQ0), 2);
  EXPECT_EQ(c.rank_for(kQ1), 5);
  EXPECT_EQ(c.rank_for(kV0), 4);
  EXPECT_TRUE(c.rank_from_pattern(kQ1));
  EXPECT_FALSE(c.rank_from_pattern(kV0));
  EXPECT_EQ(c.alpha_for(kV0), 3);
  EXPECT_EQ(c.alpha_for(kQ0), 8);
  EXPECT_DOUBLE_EQ(c.scaling_for(kV0), 3.0 / 4.0);
  EXPECT_DOUBLE_EQ(c.scaling_for(kQ0), 8.0 / 2.0);
  ordered_json reversed = ordered_json::object();
  reversed["q_proj"] = 5;
  reversed["layers.0.self_attn.q_proj"] = 2;
  EXPECT_EQ(config({{"target_modules", "all-linear"}, {"rank_pattern", reversed}}).rank_for(kQ0), 5);
}

TEST(LoraConfig, RsLoraScalesByAlphaOverTheSquareRootOfTheRank) {
  ordered_json ranks = ordered_json::object();
  ranks["q_proj"] = 4;
  const auto c = config({{"r", 16}, {"lora_alpha", 8}, {"target_modules", "all-linear"}, {"use_rslora", true},
                         {"rank_pattern", ranks}});
  EXPECT_DOUBLE_EQ(c.scaling_for(kV0), 8.0 / 4.0);  // sqrt(16)
  EXPECT_DOUBLE_EQ(c.scaling_for(kQ0), 8.0 / 2.0);  // sqrt(4)
  EXPECT_DOUBLE_EQ(config({{"r", 16}, {"lora_alpha", 8}, {"target_modules", "all-linear"}}).scaling_for(kV0), 0.5);
}

TEST(LoraConfig, ModulesToSaveMatchesAPlainSuffix) {
  const auto c = config({{"target_modules", {"q_proj"}}, {"modules_to_save", {"norm", "lm_head"}}});
  EXPECT_TRUE(c.saves("model.norm"));
  EXPECT_TRUE(c.saves("model.layers.0.input_layernorm"));  // no dot needed, unlike target lists
  EXPECT_TRUE(c.saves("lm_head"));
  EXPECT_FALSE(c.saves("model.layers.0.mlp"));
  EXPECT_FALSE(c.saves(kQ0));
}

TEST(LoraConfig, CommandLineFormsOfTargetModules) {
  peft::LoraConfig c = config({{"target_modules", {"q_proj"}}});
  c.set_target_modules("q_proj,v_proj", "--t");
  EXPECT_EQ(c.target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_FALSE(c.target_regex);
  c.set_target_modules(" q_proj , self_attn.v_proj ", "--t");
  EXPECT_EQ(c.target_modules, (std::vector<std::string>{"q_proj", "self_attn.v_proj"}));
  c.set_target_modules("o_proj", "--t");  // one name is a one-item list, not a regex
  EXPECT_TRUE(c.targets("model.layers.0.self_attn.o_proj", false));
  c.set_target_modules(".*layers\\.1\\..*_proj", "--t");
  ASSERT_TRUE(c.target_regex);
  EXPECT_TRUE(c.target_modules.empty());
  EXPECT_TRUE(c.targets(kQ1, false));
  EXPECT_FALSE(c.targets(kQ0, false));
  c.set_target_modules("all-linear", "--t");
  EXPECT_TRUE(c.all_linear);
  EXPECT_FALSE(c.target_regex);
  c.set_exclude_modules("down_proj", "--x");
  EXPECT_FALSE(c.targets(kDown1, false));
  test::expect_error([&] { c.set_target_modules("q_proj,,v_proj", "--t"); }, {"--t", "q_proj,,v_proj"});
  test::expect_error([&] { c.set_target_modules("(q_proj", "--t"); }, {"--t"});
  test::expect_error([&] { c.set_target_modules("  ", "--t"); }, {"--t", "empty"});
}

// ------------------------------------------------- against peft's own choices (fixtures)

// Every peft fixture: the tensors vkformer creates for the case's LoraConfig are exactly the ones
// peft saved (names and shapes, so ranks too), and count_trainable is their element count.
TEST(LoraConfig, CreatesExactlyTheTensorsPeftSavedInEveryFixture) {
  int cases = 0;
  for (const auto& entry : fs::directory_iterator(kFixtures / "peft")) {
    if (!entry.is_directory()) continue;
    SCOPED_TRACE(entry.path().filename().string());
    std::ifstream in(entry.path() / "meta.json");
    const auto meta = ordered_json::parse(in);
    const auto cfg = config(meta.at("lora_config"));
    auto model = models::DecoderModel::load(entry.path().string());
    const auto adapter = peft::LoraAdapter::create(model, cfg, 1);
    std::set<std::string> ours, peft_names;
    for (const auto& [n, t] : adapter->parameters()) ours.insert(n);
    for (const auto& n : meta.at("trainable")) peft_names.insert(n.get<std::string>());
    EXPECT_EQ(ours, peft_names);
    io::SafetensorsFile f((entry.path() / "adapter" / "adapter_model.safetensors").string());
    int64_t numel = 0;
    for (const auto& e : f.entries()) {
      if (e.name.find(".base_layer.") != std::string::npos) continue;  // the saved embedding matrix
      numel += shape_numel(e.shape);
      for (const auto& [n, t] : adapter->parameters())
        if (n == e.name) {
          EXPECT_EQ(t.shape(), e.shape) << n;
        }
    }
    EXPECT_EQ(peft::count_trainable(model.spec(), cfg), numel);
    EXPECT_EQ(adapter->trainable_count(), numel);
    ++cases;
  }
  EXPECT_GE(cases, 30);
}

// ------------------------------------------------------------------ initialization

struct Stats {
  double mean = 0, stddev = 0, max_abs = 0;
  size_t n = 0;
};
Stats stats(const std::vector<double>& v) {
  Stats s;
  s.n = v.size();
  for (double x : v) s.mean += x, s.max_abs = std::max(s.max_abs, std::fabs(x));
  s.mean /= static_cast<double>(v.size());
  for (double x : v) s.stddev += (x - s.mean) * (x - s.mean);
  s.stddev = std::sqrt(s.stddev / static_cast<double>(v.size()));
  return s;
}

TEST(LoraInit, KaimingUniformAAndZeroB) {
  auto model = models::DecoderModel::load(kLlama.string());
  const auto a = peft::LoraAdapter::create(model, config({{"r", 32}, {"target_modules", "all-linear"}}), 11);
  std::vector<double> scaled;  // A / bound: uniform on [-1, 1], std 1/sqrt(3)
  for (const auto& m : a->modules()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(m.A.dim(1)));  // in_features
    for (double x : m.A.to_double()) {
      ASSERT_LE(std::fabs(x), bound * (1 + 1e-7)) << m.module;
      scaled.push_back(x / bound);
    }
    for (double x : m.B.to_double()) ASSERT_EQ(x, 0.0) << m.module;
  }
  const Stats s = stats(scaled);
  ASSERT_GT(s.n, 8000u);
  EXPECT_NEAR(s.mean, 0.0, 0.03);
  EXPECT_NEAR(s.stddev, 1.0 / std::sqrt(3.0), 0.02);
  EXPECT_GT(s.max_abs, 0.99);  // the whole interval is used
}

TEST(LoraInit, GaussianAHasStandardDeviationOneOverR) {
  auto model = models::DecoderModel::load(kLlama.string());
  const int64_t r = 8;
  const auto a = peft::LoraAdapter::create(
      model, config({{"r", r}, {"target_modules", "all-linear"}, {"init_lora_weights", "gaussian"}}), 12);
  std::vector<double> all;
  for (const auto& m : a->modules()) {
    for (double x : m.A.to_double()) all.push_back(x);
    for (double x : m.B.to_double()) ASSERT_EQ(x, 0.0);
  }
  const Stats s = stats(all);
  EXPECT_NEAR(s.mean, 0.0, 0.01);
  EXPECT_NEAR(s.stddev, 1.0 / r, 0.05 / r);
}

TEST(LoraInit, EmbeddingAIsZeroAndBStandardNormal) {
  auto model = models::DecoderModel::load(kLlama.string());
  const auto a = peft::LoraAdapter::create(model, config({{"r", 64}, {"target_modules", {"embed_tokens"}}}), 13);
  ASSERT_EQ(a->modules().size(), 1u);
  const auto& m = a->modules()[0];
  EXPECT_TRUE(m.embedding);
  EXPECT_EQ(m.A.shape(), (Shape{64, 48}));  // [r, vocab]
  EXPECT_EQ(m.B.shape(), (Shape{16, 64}));  // [dim, r]
  for (double x : m.A.to_double()) ASSERT_EQ(x, 0.0);
  const Stats s = stats(m.B.to_double());
  EXPECT_NEAR(s.mean, 0.0, 0.1);
  EXPECT_NEAR(s.stddev, 1.0, 0.1);
}

TEST(LoraInit, TheSeedDecidesTheValues) {
  auto model = models::DecoderModel::load(kLlama.string());
  const auto c = config({{"target_modules", {"q_proj"}}});
  const auto a = peft::LoraAdapter::create(model, c, 5), b = peft::LoraAdapter::create(model, c, 5),
             d = peft::LoraAdapter::create(model, c, 6);
  test::expect_bitwise_equal(a->modules()[0].A, b->modules()[0].A, "same seed");
  EXPECT_NE(a->modules()[0].A.to_bytes(), d->modules()[0].A.to_bytes());
}

// ------------------------------------------------------------------ files

TEST(LoraAdapter, SaveThenLoadIsBitwise) {
  auto model = models::DecoderModel::load(kLlama.string());
  ordered_json ranks = ordered_json::object();
  ranks["v_proj"] = 3;
  const auto c = config({{"r", 4}, {"lora_alpha", 6}, {"target_modules", {"q_proj", "v_proj", "embed_tokens"}},
                         {"rank_pattern", ranks}, {"modules_to_save", {"lm_head", "norm"}},
                         {"init_lora_weights", false}, {"use_rslora", true}});
  const auto a = peft::LoraAdapter::create(model, c, 3);
  const fs::path dir = fs::temp_directory_path() / ("vkf_lora_rt_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  a->save(dir.string());
  const auto b = peft::LoraAdapter::load(model, dir.string());
  ASSERT_EQ(a->parameters().size(), b->parameters().size());
  for (size_t i = 0; i < a->parameters().size(); ++i) {
    EXPECT_EQ(a->parameters()[i].first, b->parameters()[i].first);
    test::expect_bitwise_equal(a->parameters()[i].second, b->parameters()[i].second, a->parameters()[i].first);
  }
  EXPECT_EQ(nlohmann::json(a->config().to_json()), nlohmann::json(b->config().to_json()));
  std::ifstream in(dir / "adapter_config.json");
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("peft_type"), "LORA");
  EXPECT_EQ(j.at("r"), 4);
  EXPECT_EQ(j.at("rank_pattern").at("v_proj"), 3);
  EXPECT_EQ(j.at("use_rslora"), true);
  fs::remove_all(dir);
}

// ------------------------------------------------------------------ forward and gradient

struct Batch {
  Tensor ids, mask;
  std::vector<int64_t> labels;
};
Batch tiny_batch() {
  const std::vector<int64_t> ids = {1, 5, 9, 2, 7, 3, 4, 8, 6, 2, 3, 1, 0, 0};
  const std::vector<int64_t> mask = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
  std::vector<int64_t> labels = ids;
  labels[12] = labels[13] = -100;
  return {Tensor::from_host_i64(ids, {2, 7}), Tensor::from_host_i64(mask, {2, 7}), labels};
}

TEST(LoraAdapter, ZeroBLeavesTheBaseLogitsExactly) {
  auto model = models::DecoderModel::load(kLlama.string());
  const Batch b = tiny_batch();
  autograd::NoGradScope ng;
  const auto base = model.forward(b.ids, b.mask).to_double();
  // Linear LoRA starts with B = 0; embedding LoRA with A = 0: both deltas are exactly zero.
  model.add_adapter("default", peft::LoraAdapter::create(
                                   model, config({{"target_modules", {"q_proj", "v_proj", "down_proj", "embed_tokens"}}}), 9));
  const auto with = model.forward(b.ids, b.mask).to_double();
  ASSERT_EQ(base.size(), with.size());
  EXPECT_EQ(test::max_abs_diff(base, with), 0.0);
}

std::vector<double> matmul_nt(const std::vector<double>& x, const std::vector<double>& w, int64_t rows, int64_t in,
                              int64_t out) {  // x [rows, in] · wᵀ, w [out, in]
  std::vector<double> y(static_cast<size_t>(rows * out), 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t k = 0; k < in; ++k) y[i * out + o] += x[i * in + k] * w[o * in + k];
  return y;
}

TEST(LoraAdapter, ForwardMatchesADoubleReference) {
  auto model = models::DecoderModel::load(kLlama.string());
  const auto a = peft::LoraAdapter::create(
      model, config({{"r", 3}, {"lora_alpha", 12}, {"target_modules", {"q_proj", "embed_tokens"}}, {"init_lora_weights", false}}), 4);
  test::Rng rng(21);
  const int64_t rows = 5, in = 16, out = 24, r = 3;
  const auto x = test::as_f32(rng.uniform(static_cast<size_t>(rows * in)));
  const auto y = test::as_f32(rng.uniform(static_cast<size_t>(rows * out)));
  const auto& m = a->modules()[0];
  ASSERT_EQ(m.module, "model.embed_tokens");
  const auto& q = a->modules()[1];
  ASSERT_EQ(q.module, kQ0);
  const double s = 12.0 / 3.0;
  const Tensor got = a->adapt_linear(kQ0, test::to_gpu(x, {rows, in}), test::to_gpu(y, {rows, out}));
  const auto ax = matmul_nt(x, q.A.to_double(), rows, in, r);
  const auto bax = matmul_nt(ax, q.B.to_double(), rows, r, out);
  std::vector<double> want = y;
  for (size_t i = 0; i < want.size(); ++i) want[i] += s * bax[i];
  test::expect_close(got, want, 1e-6, 1e-5, "q_proj LoRA output");
  // An untargeted module passes through unchanged.
  const Tensor yt = test::to_gpu(y, {rows, out});
  EXPECT_EQ(a->adapt_linear("model.layers.0.self_attn.k_proj", test::to_gpu(x, {rows, in}), yt).impl_ptr(),
            yt.impl_ptr());
  // Embedding: y + s · (Aᵀ[ids]) · Bᵀ, A [r, vocab], B [dim, r].
  const std::vector<int64_t> ids = {3, 0, 47, 3};
  const auto ye = test::as_f32(rng.uniform(ids.size() * 16));
  const Tensor gote = a->adapt_embedding("model.embed_tokens", Tensor::from_host_i64(ids, {4}),
                                         test::to_gpu(ye, {4, 16}), std::nullopt);
  const auto A = m.A.to_double(), B = m.B.to_double();
  std::vector<double> wante = ye;
  for (size_t t = 0; t < ids.size(); ++t)
    for (int64_t d = 0; d < 16; ++d)
      for (int64_t k = 0; k < r; ++k) wante[t * 16 + d] += s * A[k * 48 + ids[t]] * B[d * r + k];
  test::expect_close(gote, wante, 1e-6, 1e-5, "embedding LoRA output");
}

double loss_of(models::DecoderModel& m, const Batch& b) {
  autograd::NoGradScope ng;
  return train::causal_lm_loss(m.forward(b.ids, b.mask), b.labels).item();
}

TEST(LoraAdapter, LossGradientsMatchFiniteDifferencesAndSkipTheBase) {
  auto model = models::DecoderModel::load(kLlama.string());
  const auto a = peft::LoraAdapter::create(
      model, config({{"r", 2}, {"lora_alpha", 4}, {"target_modules", {"q_proj", "v_proj", "embed_tokens"}},
                     {"init_lora_weights", false}}), 8);
  model.add_adapter("default", a);
  const Batch b = tiny_batch();
  a->set_requires_grad(true);
  autograd::Tape tape;
  Tensor loss;
  {
    autograd::TapeScope scope(tape);
    loss = train::causal_lm_loss(model.forward(b.ids, b.mask), b.labels);
  }
  tape.backward(loss);
  for (const auto& n : model.parameter_names()) EXPECT_FALSE(model.param(n).grad().defined()) << n;
  for (const auto& [name, p] : a->parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    const auto g = p.grad().to_double();
    auto host = p.to_double();
    for (size_t i : {size_t{0}, host.size() - 1}) {
      const double h = 1e-2, x0 = host[i];
      auto at = [&](double v) {
        host[i] = v;
        p.copy_(test::to_gpu(host, p.shape()));
        return loss_of(model, b);
      };
      const double num = (at(x0 + h) - at(x0 - h)) / (2 * h);
      at(x0);
      EXPECT_NEAR(g[i], num, 2e-3 + 2e-2 * std::fabs(num)) << name << "[" << i << "]";
    }
  }
  a->set_requires_grad(false);
}

// ------------------------------------------------------------------ training

// Sequences of a repeating pattern: learnable within a few steps.
std::vector<train::Example> pattern_examples(size_t n) {
  std::vector<train::Example> out;
  for (size_t e = 0; e < n; ++e) {
    train::Example ex;
    for (int t = 0; t < 10; ++t) ex.ids.push_back(static_cast<int32_t>(3 + (static_cast<int>(e) + t) % 7));
    ex.labels = ex.ids;
    out.push_back(ex);
  }
  return out;
}

TEST(LoraTraining, BaseWeightsStayBitwiseWhileTheAdapterLearns) {
  auto model = models::DecoderModel::load(kLlama.string());
  std::vector<std::vector<uint8_t>> before;
  for (const auto& n : model.parameter_names()) before.push_back(model.param(n).to_bytes());
  const auto a = peft::LoraAdapter::create(
      model, config({{"r", 4}, {"lora_alpha", 8}, {"target_modules", "all-linear"}, {"modules_to_save", {"model.norm"}}}), 2);
  model.add_adapter("default", a);
  std::vector<std::vector<uint8_t>> adapter_before;
  for (const auto& [n, t] : a->parameters()) adapter_before.push_back(t.to_bytes());
  const auto data = pattern_examples(16), eval = pattern_examples(4);
  const double eval_before = train::evaluate(model, eval, 4);
  train::TrainOptions o;
  o.max_steps = 8;
  o.batch_size = 4;
  o.schedule.learning_rate = 2e-2;
  o.schedule.type = "constant";
  o.weight_decay = 0.1;
  o.adapter = a;
  const auto result = train::train(model, data, eval, o);
  ASSERT_EQ(result.log.size(), 8u);
  EXPECT_LT(result.log.back().loss, 0.7 * result.log.front().loss);
  EXPECT_LT(result.final_eval_loss, eval_before);
  const auto& names = model.parameter_names();
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_TRUE(model.param(names[i]).to_bytes() == before[i]) << names[i] << " drifted";
    EXPECT_FALSE(model.param(names[i]).grad().defined()) << names[i];
    EXPECT_FALSE(model.param(names[i]).requires_grad()) << names[i];
  }
  for (size_t i = 0; i < a->parameters().size(); ++i)
    EXPECT_NE(a->parameters()[i].second.to_bytes(), adapter_before[i]) << a->parameters()[i].first << " did not learn";
  // Evaluation runs through the adapter: without it the model is the untouched base.
  model.set_adapters_enabled(false);
  EXPECT_DOUBLE_EQ(train::evaluate(model, eval, 4), eval_before);
}

TEST(LoraTraining, ClippingNormIsOverTheAdapterGradientsOnly) {
  auto model = models::DecoderModel::load(kLlama.string());
  const auto a = peft::LoraAdapter::create(
      model, config({{"target_modules", {"q_proj", "v_proj"}}, {"init_lora_weights", false}}), 2);
  model.add_adapter("default", a);
  const auto data = pattern_examples(4);
  // The reference: one backward over the same four sequences, norm of the adapter gradients.
  std::vector<int32_t> ids;
  std::vector<int64_t> labels;
  for (const auto& e : data) ids.insert(ids.end(), e.ids.begin(), e.ids.end()), labels.insert(labels.end(), e.ids.begin(), e.ids.end());
  a->set_requires_grad(true);
  autograd::Tape tape;
  Tensor loss;
  {
    autograd::TapeScope scope(tape);
    loss = train::causal_lm_loss(model.forward(Tensor::from_host_i32(ids, {4, 10}), Tensor()), labels);
  }
  tape.backward(loss);
  double sq = 0;
  for (const auto& [n, t] : a->parameters())
    for (double g : t.grad().to_double()) sq += g * g;
  for (const auto& [n, t] : a->parameters()) t.zero_grad();
  a->set_requires_grad(false);
  train::TrainOptions o;
  o.max_steps = 1;
  o.batch_size = 4;
  o.max_grad_norm = 1e-3;  // clips: the reported norm is the one before clipping
  o.schedule.learning_rate = 1e-3;
  o.adapter = a;
  const auto result = train::train(model, data, {}, o);
  EXPECT_NEAR(result.log[0].grad_norm, std::sqrt(sq), 1e-4 * std::sqrt(sq));
}

TEST(LoraTraining, WeightDecayGroupsFollowTheTrainer) {
  EXPECT_TRUE(train::decays("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"));
  EXPECT_TRUE(train::decays("base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"));
  EXPECT_TRUE(train::decays("base_model.model.model.embed_tokens.lora_embedding_A"));
  EXPECT_TRUE(train::decays("base_model.model.lm_head.weight"));
  EXPECT_FALSE(train::decays("base_model.model.model.norm.weight"));
  EXPECT_FALSE(train::decays("base_model.model.model.layers.0.input_layernorm.weight"));
  EXPECT_FALSE(train::decays("base_model.model.model.layers.0.self_attn.q_proj.bias"));
}

// ------------------------------------------------------------------ --peft-budget

// Worked by hand for the tiny Llama: per layer q_proj costs r·(16 + 24) and v_proj r·(16 + 12),
// so q_proj,v_proj over 2 layers cost 136·r; the largest useful rank is v_proj's min(16, 12) = 12.
TEST(LoraBudget, ChoosesTheLargestRankWithinTheBudget) {
  auto model = models::DecoderModel::load(kLlama.string());
  int64_t base = 0;  // counted from the file, not from the spec
  io::SafetensorsFile f((kLlama / "model.safetensors").string());
  for (const auto& e : f.entries()) base += shape_numel(e.shape);
  EXPECT_EQ(peft::base_parameter_count(model.spec()), base);
  const auto c = config({{"target_modules", {"q_proj", "v_proj"}}});
  for (double percent : {2.5, 5.0, 10.0, 17.0, 100.0}) {
    SCOPED_TRACE(percent);
    const auto budget = static_cast<int64_t>(static_cast<double>(base) * percent / 100.0);
    const int64_t want = std::min<int64_t>(12, budget / 136);
    const auto got = peft::choose_rank_for_budget(model.spec(), c, percent);
    EXPECT_EQ(got.rank, want);
    EXPECT_EQ(got.trainable, 136 * want);
    EXPECT_EQ(got.max_rank, 12);
    EXPECT_EQ(got.base, base);
  }
  // A rank_pattern module is a fixed cost: v_proj at rank 2 costs 2·2·28 = 112; q_proj 80·r, up to 16.
  ordered_json ranks = ordered_json::object();
  ranks["v_proj"] = 2;
  const auto fixed = config({{"target_modules", {"q_proj", "v_proj"}}, {"rank_pattern", ranks}});
  const auto got = peft::choose_rank_for_budget(model.spec(), fixed, 10.0);
  EXPECT_EQ(got.rank, std::min<int64_t>(16, (base / 10 - 112) / 80));
  EXPECT_EQ(got.max_rank, 16);
  // Rank 1 (136 parameters) over a 1% budget: the error names both.
  test::expect_error([&] { peft::choose_rank_for_budget(model.spec(), c, 1.0); },
                     {"--peft-budget 1%", "rank 1 needs 136", std::to_string(base), "raise --peft-budget"});
  test::expect_error([&] { peft::choose_rank_for_budget(model.spec(), c, 0.0); }, {"--peft-budget"});
}

}  // namespace
}  // namespace vkf
