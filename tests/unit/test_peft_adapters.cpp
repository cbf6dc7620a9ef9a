// Several LoRA adapters on one base model: naming, switching, disabling, and isolation — training
// one adapter (with its own modules_to_save copies) leaves every other adapter and the base
// bitwise unchanged, and base weights get no gradients at all. Adapters are peft-made
// (tests/fixtures/peft). Also merge/unmerge through the API.
#include <filesystem>
#include <map>

#include "core/autograd.h"
#include "models/decoder.h"
#include "ops/optim.h"
#include "peft/lora.h"
#include "test_util.h"
#include "train/causal_lm.h"
#include "train/parity.h"
#include "vk/error.h"

namespace vkf {
namespace {
namespace fs = std::filesystem;

fs::path fixture(const std::string& c) {
  return fs::path(__FILE__).parent_path().parent_path() / "fixtures" / "peft" / c;
}

std::map<std::string, std::vector<uint8_t>> snapshot(const std::vector<std::pair<std::string, Tensor>>& ts) {
  std::map<std::string, std::vector<uint8_t>> out;
  for (const auto& [n, t] : ts) out[n] = t.to_bytes();
  return out;
}

std::vector<std::pair<std::string, Tensor>> base_params(const models::DecoderModel& m) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& n : m.parameter_names()) out.push_back({n, m.param(n)});
  return out;
}

TEST(PeftAdapters, TrainingOneLeavesTheOthersAndTheBaseUntouched) {
  const auto dir = fixture("llama_save");  // LoRA on q/v + modules_to_save (norms, lm_head)
  auto model = models::DecoderModel::load(dir.string());
  const auto batch = train::load_parity_batch((dir / "batch.safetensors").string());
  const auto base_logits = model.forward(batch.input_ids, batch.attention_mask).to_bytes();

  auto a = peft::LoraAdapter::load(model, (dir / "adapter").string());
  auto b = peft::LoraAdapter::load(model, (dir / "adapter").string());
  model.add_adapter("a", a);
  model.add_adapter("b", b);
  EXPECT_EQ(model.active_adapter_name(), "a");  // the first one added
  model.set_active_adapter("b");
  const auto b_logits = model.forward(batch.input_ids, batch.attention_mask).to_bytes();
  EXPECT_NE(b_logits, base_logits);
  model.set_adapters_enabled(false);
  EXPECT_EQ(model.forward(batch.input_ids, batch.attention_mask).to_bytes(), base_logits);
  model.set_adapters_enabled(true);

  const auto base_before = snapshot(base_params(model));
  const auto b_before = snapshot(b->parameters());
  const auto a_before = snapshot(a->parameters());
  model.set_active_adapter("a");
  model.set_requires_grad(false);
  a->set_requires_grad(true);
  std::vector<Tensor> trainable;
  for (const auto& [n, t] : a->parameters()) trainable.push_back(t);
  ops::AdamW opt(trainable, {1e-2, 0.9, 0.999, 1e-8, 0.01});
  for (int step = 0; step < 2; ++step) {
    autograd::Tape tape;
    Tensor loss;
    {
      autograd::TapeScope scope(tape);
      loss = train::causal_lm_loss(model.forward(batch.input_ids, batch.attention_mask), batch.labels);
    }
    tape.backward(loss);
    for (const auto& [n, t] : base_params(model)) EXPECT_FALSE(t.grad().defined()) << "base " << n;
    for (const auto& [n, t] : b->parameters()) EXPECT_FALSE(t.grad().defined()) << "adapter b " << n;
    for (const auto& [n, t] : a->parameters()) EXPECT_TRUE(t.grad().defined()) << "adapter a " << n;
    opt.step();
    opt.zero_grad();
  }
  EXPECT_EQ(snapshot(base_params(model)), base_before);  // drift exactly 0
  EXPECT_EQ(snapshot(b->parameters()), b_before);
  const auto a_after = snapshot(a->parameters());
  for (const auto& [n, bytes] : a_before) EXPECT_NE(a_after.at(n), bytes) << n << " did not train";
  // Switching back to b gives exactly b's logits from before; disabled gives the base's.
  model.set_active_adapter("b");
  EXPECT_EQ(model.forward(batch.input_ids, batch.attention_mask).to_bytes(), b_logits);
  model.set_adapters_enabled(false);
  EXPECT_EQ(model.forward(batch.input_ids, batch.attention_mask).to_bytes(), base_logits);
  test::expect_error([&] { model.set_active_adapter("c"); }, {"'c'", "a, b"});
  test::expect_error([&] { model.add_adapter("a", b); }, {"already loaded"});
}

TEST(PeftAdapters, MergeMatchesTheAdapterAndUnmergeRestoresTheBase) {
  const auto dir = fixture("llama_rank_pattern");  // ranks 2/4/6 and an alpha pattern
  auto model = models::DecoderModel::load(dir.string());
  const auto batch = train::load_parity_batch((dir / "batch.safetensors").string());
  auto a = peft::LoraAdapter::load(model, (dir / "adapter").string());
  model.add_adapter("default", a);
  const auto want = model.forward(batch.input_ids, batch.attention_mask).to_double();
  std::vector<std::vector<double>> base;
  for (const auto& n : model.parameter_names()) base.push_back(model.param(n).to_double());
  a->merge_into(model);
  model.set_adapters_enabled(false);
  test::expect_close(model.forward(batch.input_ids, batch.attention_mask).to_double(), want, 1e-5, 0,
                     "merged logits");
  test::expect_error([&] { a->merge_into(model); }, {"already merged"});
  a->unmerge_from(model);
  for (size_t i = 0; i < base.size(); ++i)
    test::expect_close(model.param(model.parameter_names()[i]).to_double(), base[i], 1e-6, 0,
                       model.parameter_names()[i].c_str());
}

TEST(PeftAdapters, WrongBaseOrBadConfigIsAClearError) {
  auto llama = models::DecoderModel::load(fixture("llama_lora").string());
  test::expect_error([&] { peft::LoraAdapter::load(llama, fixture("phi3_lora/adapter").string()); },
                     {"adapter_model.safetensors"});
  test::expect_error([&] { peft::LoraAdapter::load(llama, "/nonexistent/adapter"); }, {"not a folder"});
  peft::LoraConfig c;
  c.target_modules = {"no_such_proj"};
  test::expect_error([&] { peft::LoraAdapter::create(llama, c, 1); }, {"matches no module"});
  c.target_modules = {"input_layernorm"};
  test::expect_error([&] { peft::LoraAdapter::create(llama, c, 1); }, {"normalization", "modules_to_save"});
}

}  // namespace
}  // namespace vkf
