// The generic decoder on tiny random models of every registered model type: loading from a folder
// (f32, bf16 and sharded checkpoints, tied embeddings), forward shapes, the loss gradient of a
// few parameters against central finite differences of the GPU loss, saving and re-loading, and
// config errors. Numerical parity with transformers is tests/parity (fixtures made by it).
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/autograd.h"
#include "io/safetensors.h"
#include "models/decoder.h"
#include "models/registry.h"
#include "test_util.h"
#include "train/causal_lm.h"
#include "vk/error.h"

namespace vkf {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

json tiny_config(const std::string& type) {
  json c = {{"model_type", type},  {"vocab_size", 32},         {"hidden_size", 16},
            {"intermediate_size", 24}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
            {"num_key_value_heads", 2}, {"max_position_embeddings", 64}, {"head_dim", 6}};
  if (type == "gemma2" || type == "gemma3_text") {
    c["layer_types"] = {"sliding_attention", "full_attention"};
    c["sliding_window"] = 3;
    c["query_pre_attn_scalar"] = 5;
  }
  if (type == "gemma2") {
    c["attn_logit_softcapping"] = 2.0;
    c["final_logit_softcapping"] = 3.0;
  }
  if (type == "mistral" || type == "starcoder2") c["sliding_window"] = 3;
  if (type == "smollm3") c["no_rope_layers"] = {1, 0};
  if (type == "stablelm" || type == "cohere" || type == "starcoder2") c.erase("head_dim");
  if (type == "stablelm") c["partial_rotary_factor"] = 0.5;
  if (type == "granite") {
    c["embedding_multiplier"] = 2.0;
    c["residual_multiplier"] = 0.5;
    c["attention_multiplier"] = 0.3;
    c["logits_scaling"] = 4.0;
  }
  if (type == "llama") c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                                            {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 16}};
  return c;
}

class DecoderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("vkf_dec_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes a folder with config.json and random weights; returns its path.
  std::string make_model(const json& config, io::StDtype dtype = io::StDtype::F32, uint64_t shard = 0) {
    const fs::path d = dir_ / config["model_type"].get<std::string>();
    fs::create_directories(d);
    std::ofstream(d / "config.json") << config.dump(2);
    const auto spec = models::spec_from_config(config, "config.json");
    test::Rng rng(7);
    std::vector<io::WriteTensor> tensors;
    std::map<std::string, Tensor> params;
    for (const auto& [name, shape] : models::DecoderModel::parameter_shapes(spec)) {
      std::vector<double> v = rng.normal(static_cast<size_t>(shape_numel(shape)), 0.3);
      // Norm weights around 1 (or around 0 for the (1+w) form), so activations stay O(1).
      const bool norm_weight = name.find("norm.weight") != std::string::npos;
      if (norm_weight && !spec.norm_one_plus)
        for (auto& x : v) x += 1.0;
      params[name] = test::to_gpu(test::as_f32(v), shape);
    }
    for (const auto& [name, t] : params) {
      const Tensor stored = dtype == io::StDtype::BF16 ? t.to(DType::BF16)
                            : dtype == io::StDtype::F16  ? t.to(DType::F16)
                                                         : t;
      io::WriteTensor w = io::to_write_tensor(name, stored);
      tensors.push_back(std::move(w));
    }
    if (shard) io::write_sharded(d.string(), tensors, shard);
    else io::write_safetensors((d / "model.safetensors").string(), tensors);
    return d.string();
  }

  fs::path dir_;
};

struct Batch {
  Tensor ids, mask;
  std::vector<int64_t> labels;
};

Batch tiny_batch(int64_t vocab) {
  const std::vector<int64_t> ids = {1, 5, 9, 2, 7, 3, 4, 8, 6, 2, 3, 1, 0, 0};
  const std::vector<int64_t> mask = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
  std::vector<int64_t> labels = ids;
  labels[12] = labels[13] = -100;
  for (auto& x : labels)
    if (x >= vocab) x %= vocab;
  return {Tensor::from_host_i64(ids, {2, 7}), Tensor::from_host_i64(mask, {2, 7}), labels};
}

double loss_of(models::DecoderModel& m, const Batch& b) {
  autograd::NoGradScope ng;
  return train::causal_lm_loss(m.forward(b.ids, b.mask), b.labels).item();
}

TEST_F(DecoderTest, EveryModelTypeRunsAndItsGradientsMatchFiniteDifferences) {
  for (const auto& arch : models::supported_architectures()) {
    SCOPED_TRACE(arch.model_type);
    const std::string dir = make_model(tiny_config(arch.model_type));
    ASSERT_FALSE(dir.empty());
    auto model = models::DecoderModel::load(dir);
    const Batch b = tiny_batch(model.spec().vocab_size);
    model.set_requires_grad(true);
    autograd::Tape tape;
    Tensor logits, loss;
    {
      autograd::TapeScope scope(tape);
      logits = model.forward(b.ids, b.mask);
      loss = train::causal_lm_loss(logits, b.labels);
    }
    EXPECT_EQ(logits.shape(), (Shape{2, 7, model.spec().vocab_size}));
    const double l0 = loss.item();
    EXPECT_TRUE(std::isfinite(l0));
    tape.backward(loss);
    // Central differences of the (f32) GPU loss for a few elements of three parameters.
    const auto& names = model.parameter_names();
    for (const std::string& name : {names.front(), names[names.size() / 2], names.back()}) {
      const Tensor p = model.param(name);
      const auto g = p.grad().to_double();
      auto host = p.to_double();
      for (size_t i : {size_t{0}, host.size() / 2, host.size() - 1}) {
        const double h = 1e-2, x = host[i];
        auto at = [&](double v) {
          host[i] = v;
          p.copy_(test::to_gpu(host, p.shape()));
          return loss_of(model, b);
        };
        const double num = (at(x + h) - at(x - h)) / (2 * h);
        at(x);
        EXPECT_NEAR(g[i], num, 2e-3 + 2e-2 * std::fabs(num)) << name << "[" << i << "]";
      }
    }
    model.set_requires_grad(false);
  }
}

TEST_F(DecoderTest, Bf16ShardedAndSavedCheckpointsLoad) {
  const json cfg = tiny_config("llama");
  auto ref = models::DecoderModel::load(make_model(cfg));
  const Batch b = tiny_batch(32);
  const auto want = ref.forward(b.ids, b.mask).to_double();
  // Sharded: same logits bit for bit.
  fs::remove_all(dir_ / "llama");
  auto sharded = models::DecoderModel::load(make_model(cfg, io::StDtype::F32, 4000));
  EXPECT_TRUE(fs::exists(dir_ / "llama" / "model.safetensors.index.json"));
  EXPECT_EQ(sharded.forward(b.ids, b.mask).to_double(), want);
  // Saved and re-loaded: identical.
  sharded.save((dir_ / "saved").string());
  auto again = models::DecoderModel::load((dir_ / "saved").string());
  EXPECT_EQ(again.forward(b.ids, b.mask).to_double(), want);
  // bf16 weights widen to f32: close to, not equal to, the f32 model.
  fs::remove_all(dir_ / "llama");
  auto bf = models::DecoderModel::load(make_model(cfg, io::StDtype::BF16));
  EXPECT_EQ(bf.param("model.embed_tokens.weight").dtype(), DType::F32);
  test::expect_close(bf.forward(b.ids, b.mask).to_double(), want, 0.1, 0.05, "bf16 logits");
}

TEST_F(DecoderTest, F16CheckpointLoads) {
  const json cfg = tiny_config("qwen2");
  auto ref = models::DecoderModel::load(make_model(cfg));
  const Batch b = tiny_batch(32);
  const auto want = ref.forward(b.ids, b.mask).to_double();
  fs::remove_all(dir_ / "qwen2");
  auto half = models::DecoderModel::load(make_model(cfg, io::StDtype::F16));
  EXPECT_EQ(half.param("model.layers.0.self_attn.q_proj.bias").dtype(), DType::F32);
  test::expect_close(half.forward(b.ids, b.mask).to_double(), want, 0.02, 0.01, "f16 logits");
}

TEST(Registry, VerifiedMeansAPassingParityFixture) {
  // An architecture is "verified" exactly when tests/fixtures/parity holds its fixture and it is
  // not listed in UNVERIFIED (ctest then runs it).
  const fs::path root = fs::path(__FILE__).parent_path().parent_path() / "fixtures" / "parity";
  std::set<std::string> unverified;
  std::ifstream in(root / "UNVERIFIED");
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') unverified.insert(line.substr(0, line.find(' ')));
  for (const auto& a : models::supported_architectures()) {
    const bool fixture = fs::is_directory(root / a.model_type);
    EXPECT_EQ(a.verified, fixture && !unverified.count(a.model_type)) << a.model_type;
  }
}

TEST_F(DecoderTest, TiedEmbeddingsAreStoredOnceAndGetBothGradients) {
  const json cfg = tiny_config("gemma");
  auto m = models::DecoderModel::load(make_model(cfg));
  EXPECT_TRUE(m.spec().tie_word_embeddings);
  for (const auto& n : m.parameter_names()) EXPECT_NE(n, "lm_head.weight");
  m.save((dir_ / "saved").string());
  io::SafetensorsFile f((dir_ / "saved" / "model.safetensors").string());
  EXPECT_EQ(f.find("lm_head.weight"), nullptr);
  EXPECT_NE(f.find("model.embed_tokens.weight"), nullptr);
}

TEST_F(DecoderTest, ConfigErrorsNameTheKey) {
  json c = tiny_config("llama");
  c["model_type"] = "mamba";
  test::expect_error([&] { models::spec_from_config(c, "x/config.json"); },
                     {"x/config.json", "mamba", "not supported", "llama", "starcoder2"});
  c = tiny_config("llama");
  c.erase("hidden_size");
  test::expect_error([&] { models::spec_from_config(c, "config.json"); }, {"hidden_size", "missing"});
  c = tiny_config("llama");
  c["num_key_value_heads"] = 3;
  test::expect_error([&] { models::spec_from_config(c, "config.json"); }, {"num_key_value_heads", "divide"});
  c = tiny_config("llama");
  c["rope_scaling"] = {{"rope_type", "ntk-magic"}};
  test::expect_error([&] { models::spec_from_config(c, "config.json"); }, {"ntk-magic", "not supported"});
  c = tiny_config("llama");
  c["hidden_act"] = "mish";
  test::expect_error([&] { models::spec_from_config(c, "config.json"); }, {"hidden_act", "mish"});
  c = tiny_config("cohere");
  c["use_qk_norm"] = true;
  test::expect_error([&] { models::spec_from_config(c, "config.json"); }, {"use_qk_norm"});
  // A checkpoint missing a tensor names the file and the tensor.
  const std::string d = make_model(tiny_config("qwen3"));
  io::SafetensorsFile f(d + "/model.safetensors");
  std::vector<io::WriteTensor> keep;
  for (const auto& e : f.entries())
    if (e.name != "model.layers.1.self_attn.k_norm.weight") keep.push_back(io::to_write_tensor(e.name, f.load(e.name)));
  io::write_safetensors(d + "/model.safetensors", keep);
  test::expect_error([&] { models::DecoderModel::load(d); }, {"model.layers.1.self_attn.k_norm.weight", "missing"});
}

}  // namespace
}  // namespace vkf
