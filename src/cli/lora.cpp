// `vkformer lora merge`: folds a LoRA adapter into its base model and writes a full Hugging Face
// model folder (what peft's merge_and_unload + save_pretrained gives), with the tokenizer files.
// It checks its own work: logits of the merged model against base + adapter on a probe batch, and
// unmerging restores the base weights (both differences are printed).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <filesystem>

#include "cli/commands.h"
#include "core/autograd.h"
#include "hub/resolve.h"
#include "io/safetensors.h"
#include "models/decoder.h"
#include "models/registry.h"
#include "peft/lora.h"
#include "vk/error.h"

namespace vkf::cli {
namespace {
namespace fs = std::filesystem;

struct MergeArgs {
  std::string model, adapter, out;
};

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// The same model with an untied LM head (lm_head.weight = a copy of the embedding), for adapters
// that change the head of a tied model: merged, the head and the embedding differ.
models::DecoderModel untied(const models::DecoderModel& m) {
  nlohmann::json cfg = m.spec().config;
  cfg["tie_word_embeddings"] = false;
  models::ArchSpec spec = models::spec_from_config(cfg, "config.json (untied)");
  std::map<std::string, Tensor> params;
  for (const auto& n : m.parameter_names()) params[n] = m.param(n).clone();
  params[spec.names.lm_head] = m.param(spec.names.embed).clone();
  return models::DecoderModel(std::move(spec), std::move(params));
}

int run_merge(const MergeArgs& a) {
  autograd::NoGradScope no_grad;
  auto model = models::DecoderModel::load(hub::resolve_path(a.model, hub::Need::Model));
  auto adapter = peft::LoraAdapter::load(model, hub::resolve_path(a.adapter, hub::Need::Adapter));
  const auto& spec = model.spec();
  // On a tied model, merging into either the embedding or the head would change both; the
  // adapter changes only one of them, so the merged model gets its own head.
  bool tie_breaks = false;
  for (const auto& m : adapter->modules())
    tie_breaks |= m.module + ".weight" == spec.names.lm_head || m.module + ".weight" == spec.names.embed;
  tie_breaks |= adapter->replacement(spec.names.lm_head) != nullptr;
  tie_breaks |= adapter->replacement(spec.names.embed) != nullptr;
  if (tie_breaks && spec.tie_word_embeddings) {
    fmt::print("the adapter changes the embedding or the LM head of a tied model: the merged model gets "
               "its own lm_head (tie_word_embeddings false)\n");
    model = untied(model);
  }
  model.add_adapter("default", adapter);
  // A probe batch: the first ids of the vocabulary, in two rows.
  const int64_t T = std::min<int64_t>(16, spec.vocab_size);
  std::vector<int32_t> ids;
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t t = 0; t < T; ++t) ids.push_back(static_cast<int32_t>((t * 7 + r * 3) % spec.vocab_size));
  const Tensor probe = Tensor::from_host_i32(ids, {2, T});
  const auto with_adapter = model.forward(probe, {}).to_double();
  std::map<std::string, std::vector<uint8_t>> original;
  for (const auto& n : model.parameter_names()) original[n] = model.param(n).to_bytes();

  adapter->merge_into(model);
  model.set_adapters_enabled(false);
  const auto merged = model.forward(probe, {}).to_double();
  const double logit_diff = max_abs_diff(merged, with_adapter);
  model.save(a.out);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                        "generation_config.json", "chat_template.jinja", "tokenizer.model"}) {
    const fs::path src = fs::path(a.model) / f;
    if (fs::exists(src)) fs::copy_file(src, fs::path(a.out) / f, fs::copy_options::overwrite_existing);
  }
  fmt::print("merged {} LoRA module(s) and {} saved tensor(s) into {}\n", adapter->modules().size(),
             adapter->parameters().size() - 2 * adapter->modules().size(), a.out);
  fmt::print("max |logits(merged) - logits(base + adapter)| on a probe batch: {:.3e}\n", logit_diff);

  // Unmerge: the base weights come back within fp32 rounding of (W + Δ) - Δ.
  adapter->unmerge_from(model);
  double weight_diff = 0;
  for (const auto& n : model.parameter_names()) {
    const auto now = model.param(n).to_double();
    const auto& bytes = original[n];
    std::vector<float> was(bytes.size() / sizeof(float));
    std::memcpy(was.data(), bytes.data(), bytes.size());
    for (size_t i = 0; i < was.size(); ++i) weight_diff = std::max(weight_diff, std::fabs(now[i] - was[i]));
  }
  fmt::print("unmerge: max |W(unmerged) - W(base)| = {:.3e}\n", weight_diff);
  return 0;
}

}  // namespace

void add_lora_command(CLI::App& app, int& exit_code) {
  auto* lora = app.add_subcommand("lora", "LoRA adapter tools");
  lora->require_subcommand(1);
  static MergeArgs m;
  auto* merge = lora->add_subcommand("merge", "Merge an adapter into its base model and write a full model folder");
  merge->add_option("--model", m.model, "the base Hugging Face model folder")->required();
  merge->add_option("--adapter", m.adapter, "the peft LoRA adapter folder")->required();
  merge->add_option("--out", m.out, "output folder for the merged model")->required();
  merge->callback([&exit_code] { exit_code = run_merge(m); });
}

}  // namespace vkf::cli
