// A LoRA adapter on a DecoderModel, file-compatible with Hugging Face peft: low-rank pairs (A, B)
// on the targeted linear layers (y = base(x) + scaling · B(A(dropout(x)))) and on the embedding
// (y = base(ids) + scaling · B(Aᵀ[ids])), plus modules_to_save copies that replace base weights
// while the adapter is active. Weights use peft's layouts and file names
// (`base_model.model.<module>.lora_A.weight` [r, in], `lora_B.weight` [out, r],
// `lora_embedding_A` [r, vocab], `lora_embedding_B` [dim, r], a saved module under its own name).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "models/decoder.h"
#include "nn/linear.h"
#include "peft/lora_config.h"

namespace vkf::peft {

// A module LoRA can adapt or modules_to_save can copy.
struct ModuleInfo {
  std::string name;        // HF module name, e.g. "model.layers.0.mlp.up_proj"
  enum Kind { Linear, Embedding, Norm } kind;
  int64_t in = 0, out = 0;  // linear: in/out features; embedding: vocab / dim; norm: width
  bool is_head = false;     // the LM head (left out by "all-linear")
  std::vector<std::string> params;  // its parameter names in the base model (weight, bias)
};
std::vector<ModuleInfo> model_modules(const models::ArchSpec& spec);
// Whether `config` puts a LoRA pair on `module`: LoraConfig::targets, where "all-linear" takes
// linear layers only (peft selects nn.Linear modules: not the embedding or norms).
bool is_lora_target(const LoraConfig& config, const ModuleInfo& module);

struct LoraModule {
  std::string module;
  bool embedding = false;
  int64_t rank = 0;
  double alpha = 0;
  float scaling = 0;
  float dropout = 0;
  Tensor A, B;
};

class LoraAdapter : public nn::ModuleAdapter {
 public:
  // A new adapter for a model of `spec`, initialized as peft does for config.init_lora_weights
  // (values from a generator seeded with `seed`, not torch's). Fails, naming the option, when a
  // target or modules_to_save entry matches nothing or an unsupported module.
  static std::shared_ptr<LoraAdapter> create(const models::DecoderModel& model, const LoraConfig& config,
                                             uint64_t seed);
  // adapter_config.json + adapter_model.safetensors from a folder written by peft or vkformer.
  static std::shared_ptr<LoraAdapter> load(const models::DecoderModel& model, const std::string& dir);
  // Writes both files into `dir` (created; each file written atomically).
  void save(const std::string& dir) const;

  const LoraConfig& config() const { return config_; }
  // Recorded in adapter_config.json (peft: the path or hub id the base model was loaded from).
  void set_base_model_name_or_path(const std::string& path) { config_.base_model_name_or_path = path; }
  const std::vector<LoraModule>& modules() const { return modules_; }
  // Trainable tensors under their adapter_model.safetensors names, in the model's module order.
  const std::vector<std::pair<std::string, Tensor>>& parameters() const { return params_; }
  int64_t trainable_count() const;
  void set_requires_grad(bool on) const;

  // Adds (merge) or subtracts (unmerge) every delta scaling·B·A into the model's base weights and
  // copies modules_to_save weights in (merge) or back (unmerge, from the copies taken at merge).
  void merge_into(models::DecoderModel& model);
  void unmerge_from(models::DecoderModel& model);

  // nn::ModuleAdapter
  Tensor adapt_linear(const std::string& module, const Tensor& x, const Tensor& y) const override;
  bool adapts_linear(const std::string& module) const override { return find(module) != nullptr; }
  Tensor adapt_embedding(const std::string& module, const Tensor& ids, const Tensor& y,
                         std::optional<int64_t> padding_idx) const override;
  const Tensor* replacement(const std::string& param_name) const override;

 private:
  LoraAdapter() = default;
  // Builds the module list (ranks, scalings) for the model, tensors unset; returns the shapes of
  // the modules_to_save copies, in saved_ order.
  std::vector<Shape> plan(const models::DecoderModel& model);
  void index_parameters();
  const LoraModule* find(const std::string& module) const;

  LoraConfig config_;
  std::vector<LoraModule> modules_;
  std::unordered_map<std::string, size_t> by_module_;  // module name -> index in modules_
  std::vector<std::pair<std::string, Tensor>> saved_;  // modules_to_save: base param name -> copy
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> merged_originals_;  // base weights replaced by merge
};

// peft's file name of a tensor: "base_model.model." + name.
std::string peft_key(const std::string& name);

// Trainable parameters a config would create on a model of `spec` (for --peft-budget).
int64_t count_trainable(const models::ArchSpec& spec, const LoraConfig& config);

}  // namespace vkf::peft
