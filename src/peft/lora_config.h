// LoRA configuration as peft's LoraConfig: the fields of adapter_config.json, and the rules by
// which peft decides which modules get an adapter (target_modules as a list of name suffixes, a
// regex or "all-linear"; exclude_modules; layers_to_transform/layers_pattern) and with which rank
// and alpha (rank_pattern/alpha_pattern, use_rslora).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vkf::peft {

struct LoraConfig {
  int64_t r = 8;
  double lora_alpha = 8;
  double lora_dropout = 0.0;
  // target_modules: a list of names (a module matches when its name equals one or ends with
  // "." + one), or a regex (full match) when target_regex is set, or every linear layer except
  // the output head when all_linear. Same forms for exclude_modules.
  std::vector<std::string> target_modules;
  std::optional<std::string> target_regex;
  bool all_linear = false;
  std::vector<std::string> exclude_modules;
  std::optional<std::string> exclude_regex;
  std::vector<int64_t> layers_to_transform;  // empty: every layer
  std::vector<std::string> layers_pattern;   // e.g. "layers"; empty: any "<name>.<index>."
  // In file order: peft takes the first key that matches.
  std::vector<std::pair<std::string, int64_t>> rank_pattern;
  std::vector<std::pair<std::string, double>> alpha_pattern;
  bool use_rslora = false;
  std::vector<std::string> modules_to_save;
  std::string init_lora_weights = "true";  // "true" (kaiming-uniform A, zero B), "gaussian", "false"
  std::string bias = "none";
  std::string base_model_name_or_path;
  nlohmann::ordered_json extra;  // fields kept but not interpreted (task_type, revision, ...)

  // Parses adapter_config.json (`source` names the file in errors). Refuses what vkformer does not
  // implement (peft_type other than LORA, bias other than "none", DoRA, ...) with the field named.
  static LoraConfig from_json(const nlohmann::ordered_json& j, const std::string& source);
  static LoraConfig from_file(const std::string& path);
  nlohmann::ordered_json to_json() const;  // as peft writes adapter_config.json

  // Whether a module (HF name, e.g. "model.layers.0.self_attn.q_proj") gets an adapter.
  // `is_output_head` marks the LM head, which "all-linear" leaves out as peft does.
  bool targets(const std::string& module, bool is_output_head) const;
  bool excludes(const std::string& module) const;
  bool saves(const std::string& module) const;  // modules_to_save: a plain name suffix, as peft
  int64_t rank_for(const std::string& module) const;
  double alpha_for(const std::string& module) const;
  // lora_alpha / r, or lora_alpha / sqrt(r) with rsLoRA.
  double scaling_for(const std::string& module) const;
  // Whether a rank_pattern key gives this module its rank (so `r` does not).
  bool rank_from_pattern(const std::string& module) const;

  // The command line's form of target_modules / exclude_modules (vkformer train
  // --lora-target-modules / --lora-exclude-modules): "all-linear" (targets only); names made of
  // letters, digits, '_', '.' and '-' separated by commas are a list (peft's suffix rule for each
  // name); any other value is one regex that must match the whole module name (peft's rule for a
  // string). `option` names the option in errors.
  void set_target_modules(const std::string& value, const std::string& option);
  void set_exclude_modules(const std::string& value, const std::string& option);
};

// What LoRA targets when no target is given: peft's per-architecture default
// (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING): the query and value projections, which
// phi3 fuses into qkv_proj. peft has no entry for some model types vkformer runs (cohere, olmo2,
// granite, smollm3); they use the same q_proj/v_proj default.
std::vector<std::string> default_target_modules(const std::string& model_type);

// peft's modules_to_save rule: the module name ends with the key (no dot boundary).
bool saved_by_key(const std::string& module, const std::string& key);
// peft's list rule: name == key or name ends with "." + key.
bool name_matches_key(const std::string& name, const std::string& key);
// Full match of a Python-style regex (PCRE2).
bool regex_full_match(const std::string& pattern, const std::string& text, const std::string& where);

}  // namespace vkf::peft
