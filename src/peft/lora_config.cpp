// LoraConfig parsing, writing and module matching (see lora_config.h).
#include "peft/lora_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <regex>

#include "tokenizer/regex.h"
#include "vk/error.h"

namespace vkf::peft {
using nlohmann::ordered_json;

bool name_matches_key(const std::string& name, const std::string& key) {
  return name == key || (name.size() > key.size() && name.compare(name.size() - key.size(), key.size(), key) == 0 &&
                         name[name.size() - key.size() - 1] == '.');
}

bool saved_by_key(const std::string& module, const std::string& key) {
  return module.size() >= key.size() && module.compare(module.size() - key.size(), key.size(), key) == 0;
}

bool regex_full_match(const std::string& pattern, const std::string& text, const std::string& where) {
  std::shared_ptr<const tok::Regex> re;
  try {
    re = tok::Regex::get("\\A(?:" + pattern + ")\\z", where);
  } catch (const Error& e) {
    // The regex cache's message ends with advice about tokenizer.json; here the pattern is a
    // peft option, so keep PCRE's diagnosis and give the right advice.
    std::string why = e.what();
    why = why.substr(0, why.find("; fix the pattern in tokenizer.json"));
    fail("{}; write a valid regex (Python syntax), or names separated by commas", why);
  }
  for (const auto& [b, e] : re->find_all(text))
    if (b == 0 && e == text.size()) return true;
  return false;
}

namespace {

// Python's re.match(rf"(.*\.)?({key})$", name): the first pattern key whose regex ends the name
// at a dot boundary (or is the whole name).
template <typename V>
const V* pattern_value(const std::vector<std::pair<std::string, V>>& patterns, const std::string& module) {
  for (const auto& [key, value] : patterns)
    if (regex_full_match("(?:.*\\.)?(?:" + key + ")", module, "rank_pattern/alpha_pattern key '" + key + "'"))
      return &value;
  return nullptr;
}

// The layer index of a module name as peft finds it: the number after "<pattern>." (any name when
// no pattern is given), e.g. 3 in "model.layers.3.mlp.up_proj".
std::optional<int64_t> layer_index(const std::string& module, const std::vector<std::string>& patterns) {
  std::vector<std::string> ps = patterns.empty() ? std::vector<std::string>{"[^.]*"} : patterns;
  for (const auto& p : ps) {
    const auto re = tok::Regex::get("\\A.*\\.(?:" + p + ")\\.(\\d+)\\.", "layers_pattern");
    // Regex::find_all gives the whole match; the digits are right before its final '.'.
    for (const auto& [b, e] : re->find_all(module)) {
      if (b != 0) continue;
      size_t d = e - 1;
      while (d > 0 && std::isdigit(static_cast<unsigned char>(module[d - 1]))) --d;
      return std::stoll(module.substr(d, e - 1 - d));
    }
  }
  return std::nullopt;
}

std::vector<std::string> string_list(const ordered_json& v, const std::string& where) {
  std::vector<std::string> out;
  VKF_REQUIRE(v.is_array(), "{}: must be a list of strings or a string", where);
  for (const auto& e : v) {
    VKF_REQUIRE(e.is_string(), "{}: must be a list of strings or a string", where);
    out.push_back(e.get<std::string>());
  }
  return out;
}

}  // namespace

LoraConfig LoraConfig::from_json(const ordered_json& j, const std::string& src) {
  VKF_REQUIRE(j.is_object(), "{}: an adapter config must be a JSON object", src);
  LoraConfig c;
  auto field = [&](const char* k) { return fmt::format("{}: field '{}'", src, k); };
  auto has = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };
  auto truthy = [&](const char* k) {
    if (!has(k)) return false;
    const auto& v = j[k];
    return v.is_boolean() ? v.get<bool>() : !(v.is_array() || v.is_object()) || !v.empty();
  };
  try {
    if (has("peft_type")) {
      const auto t = j["peft_type"].get<std::string>();
      VKF_REQUIRE(t == "LORA", "{} is '{}'; vkformer implements LoRA adapters (peft_type LORA) only",
                  field("peft_type"), t);
    }
    for (const char* unsupported : {"use_dora", "fan_in_fan_out", "lora_bias", "target_parameters",
                                    "layer_replication", "trainable_token_indices", "use_qalora",
                                    "megatron_config", "loftq_config", "eva_config", "corda_config",
                                    "alora_invocation_tokens", "arrow_config", "kasa_config",
                                    "velora_config", "monteclora_config", "lora_ga_config", "use_bdlora",
                                    "ensure_weight_tying"}) {
      if (std::string(unsupported) == "loftq_config" && has(unsupported) && j[unsupported].empty()) continue;
      VKF_REQUIRE(!truthy(unsupported), "{} is set; vkformer does not implement it (remove it or set it "
                  "to false/empty)", field(unsupported));
    }
    if (has("r")) c.r = j["r"].get<int64_t>();
    VKF_REQUIRE(c.r >= 1, "{} must be a positive rank (got {})", field("r"), c.r);
    if (has("lora_alpha")) c.lora_alpha = j["lora_alpha"].get<double>();
    if (has("lora_dropout")) c.lora_dropout = j["lora_dropout"].get<double>();
    VKF_REQUIRE(c.lora_dropout >= 0 && c.lora_dropout < 1, "{} must be in [0, 1)", field("lora_dropout"));
    if (has("target_modules")) {
      const auto& t = j["target_modules"];
      if (t.is_string() && t.get<std::string>() == "all-linear") c.all_linear = true;
      else if (t.is_string()) c.target_regex = t.get<std::string>();
      else c.target_modules = string_list(t, field("target_modules"));
    }
    if (has("exclude_modules")) {
      const auto& t = j["exclude_modules"];
      if (t.is_string()) c.exclude_regex = t.get<std::string>();
      else c.exclude_modules = string_list(t, field("exclude_modules"));
    }
    if (has("layers_to_transform")) {
      const auto& t = j["layers_to_transform"];
      if (t.is_number_integer()) c.layers_to_transform = {t.get<int64_t>()};
      else c.layers_to_transform = t.get<std::vector<int64_t>>();
    }
    if (has("layers_pattern")) {
      const auto& t = j["layers_pattern"];
      if (t.is_string()) c.layers_pattern = {t.get<std::string>()};
      else c.layers_pattern = string_list(t, field("layers_pattern"));
    }
    if (has("rank_pattern")) {
      for (const auto& [k, v] : j["rank_pattern"].items()) {
        VKF_REQUIRE(v.is_number_integer() && v.get<int64_t>() >= 1, "{}: rank for '{}' must be a positive integer",
                    field("rank_pattern"), k);
        c.rank_pattern.push_back({k, v.get<int64_t>()});
      }
    }
    if (has("alpha_pattern")) {
      for (const auto& [k, v] : j["alpha_pattern"].items()) {
        VKF_REQUIRE(v.is_number(), "{}: alpha for '{}' must be a number", field("alpha_pattern"), k);
        c.alpha_pattern.push_back({k, v.get<double>()});
      }
    }
    if (has("use_rslora")) c.use_rslora = j["use_rslora"].get<bool>();
    if (has("modules_to_save")) c.modules_to_save = string_list(j["modules_to_save"], field("modules_to_save"));
    if (has("init_lora_weights")) {
      const auto& v = j["init_lora_weights"];
      if (v.is_boolean()) c.init_lora_weights = v.get<bool>() ? "true" : "false";
      else c.init_lora_weights = v.get<std::string>();
      VKF_REQUIRE(c.init_lora_weights == "true" || c.init_lora_weights == "false" ||
                      c.init_lora_weights == "gaussian",
                  "{} is '{}'; supported: true (kaiming-uniform A, zero B), \"gaussian\", false",
                  field("init_lora_weights"), c.init_lora_weights);
    }
    if (has("bias")) c.bias = j["bias"].get<std::string>();
    VKF_REQUIRE(c.bias == "none", "{} is '{}'; vkformer trains LoRA with bias=\"none\" only", field("bias"), c.bias);
    if (has("base_model_name_or_path")) c.base_model_name_or_path = j["base_model_name_or_path"].get<std::string>();
  } catch (const ordered_json::exception& e) {
    fail("{}: a field has the wrong type ({})", src, e.what());
  }
  static const std::vector<std::string> known = {
      "peft_type", "r", "lora_alpha", "lora_dropout", "target_modules", "exclude_modules",
      "layers_to_transform", "layers_pattern", "rank_pattern", "alpha_pattern", "use_rslora",
      "modules_to_save", "init_lora_weights", "bias", "base_model_name_or_path"};
  for (const auto& [k, v] : j.items())
    if (std::find(known.begin(), known.end(), k) == known.end()) c.extra[k] = v;
  VKF_REQUIRE(c.all_linear || c.target_regex || !c.target_modules.empty(),
              "{}: target_modules is empty; name the modules to adapt (e.g. [\"q_proj\", \"v_proj\"] or "
              "\"all-linear\")", src);
  return c;
}

LoraConfig LoraConfig::from_file(const std::string& path) {
  std::ifstream in(path);
  VKF_REQUIRE(in, "{}: cannot open the adapter config", path);
  ordered_json j;
  try {
    j = ordered_json::parse(in);
  } catch (const ordered_json::exception& e) {
    fail("{}: not valid JSON ({})", path, e.what());
  }
  return from_json(j, path);
}

ordered_json LoraConfig::to_json() const {
  ordered_json j;
  j["alpha_pattern"] = ordered_json::object();
  for (const auto& [k, v] : alpha_pattern) j["alpha_pattern"][k] = v;
  j["base_model_name_or_path"] = base_model_name_or_path.empty() ? ordered_json() : ordered_json(base_model_name_or_path);
  j["bias"] = bias;
  j["exclude_modules"] = exclude_regex ? ordered_json(*exclude_regex)
                         : exclude_modules.empty() ? ordered_json() : ordered_json(exclude_modules);
  j["fan_in_fan_out"] = false;
  j["inference_mode"] = true;
  if (init_lora_weights == "gaussian") j["init_lora_weights"] = "gaussian";
  else j["init_lora_weights"] = init_lora_weights == "true";
  j["layers_pattern"] = layers_pattern.empty() ? ordered_json() : layers_pattern.size() == 1
                        ? ordered_json(layers_pattern[0]) : ordered_json(layers_pattern);
  j["layers_to_transform"] = layers_to_transform.empty() ? ordered_json() : ordered_json(layers_to_transform);
  j["lora_alpha"] = lora_alpha;
  j["lora_dropout"] = lora_dropout;
  j["modules_to_save"] = modules_to_save.empty() ? ordered_json() : ordered_json(modules_to_save);
  j["peft_type"] = "LORA";
  j["r"] = r;
  j["rank_pattern"] = ordered_json::object();
  for (const auto& [k, v] : rank_pattern) j["rank_pattern"][k] = v;
  j["target_modules"] = all_linear ? ordered_json("all-linear")
                        : target_regex ? ordered_json(*target_regex) : ordered_json(target_modules);
  j["task_type"] = "CAUSAL_LM";
  j["use_dora"] = false;
  j["use_rslora"] = use_rslora;
  for (const auto& [k, v] : extra.items()) j[k] = v;
  return j;
}

bool LoraConfig::excludes(const std::string& module) const {
  if (exclude_regex) return regex_full_match(*exclude_regex, module, "exclude_modules");
  for (const auto& k : exclude_modules)
    if (name_matches_key(module, k)) return true;
  return false;
}

bool LoraConfig::targets(const std::string& module, bool is_output_head) const {
  if (excludes(module)) return false;
  bool found = false;
  if (all_linear) found = !is_output_head;
  else if (target_regex) found = regex_full_match(*target_regex, module, "target_modules");
  else
    for (const auto& k : target_modules) found = found || name_matches_key(module, k);
  if (found && !layers_to_transform.empty()) {
    const auto idx = layer_index(module, layers_pattern);
    found = idx && std::find(layers_to_transform.begin(), layers_to_transform.end(), *idx) != layers_to_transform.end();
  }
  return found;
}

bool LoraConfig::saves(const std::string& module) const {
  // peft matches modules_to_save by a plain suffix: "norm" takes input_layernorm, q_norm and
  // model.norm alike (checked against peft 0.21's saved files).
  for (const auto& k : modules_to_save)
    if (saved_by_key(module, k)) return true;
  return false;
}

int64_t LoraConfig::rank_for(const std::string& module) const {
  const int64_t* v = pattern_value(rank_pattern, module);
  return v ? *v : r;
}

double LoraConfig::alpha_for(const std::string& module) const {
  const double* v = pattern_value(alpha_pattern, module);
  return v ? *v : lora_alpha;
}

bool LoraConfig::rank_from_pattern(const std::string& module) const {
  return pattern_value(rank_pattern, module) != nullptr;
}

namespace {

// A list ("q_proj,v_proj") or a regex, as set_target_modules documents.
void parse_module_option(const std::string& raw, const std::string& option, std::vector<std::string>& list,
                         std::optional<std::string>& regex) {
  auto trim = [](std::string v) {
    const auto b = v.find_first_not_of(" \t"), e = v.find_last_not_of(" \t");
    return b == std::string::npos ? std::string() : v.substr(b, e - b + 1);
  };
  const std::string value = trim(raw);
  VKF_REQUIRE(!value.empty(), "{} is empty; give module names separated by commas (e.g. q_proj,v_proj), a "
              "regex or all-linear", option);
  list.clear();
  regex.reset();
  const bool names_only = std::all_of(value.begin(), value.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.' || ch == '-' || ch == ',' ||
           ch == ' ';
  });
  if (!names_only) {
    regex_full_match(value, "", option + " '" + value + "' (a regex)");  // compiles it: a bad regex fails here
    regex = value;
    return;
  }
  size_t start = 0;
  while (start <= value.size()) {
    const size_t comma = std::min(value.find(',', start), value.size());
    const std::string name = trim(value.substr(start, comma - start));
    VKF_REQUIRE(!name.empty() && name.find(' ') == std::string::npos,
                "{} '{}': names are separated by single commas (e.g. q_proj,v_proj)", option, value);
    list.push_back(name);
    start = comma + 1;
  }
}

}  // namespace

void LoraConfig::set_target_modules(const std::string& value, const std::string& option) {
  all_linear = value == "all-linear";
  if (all_linear) {
    target_modules.clear();
    target_regex.reset();
    return;
  }
  parse_module_option(value, option, target_modules, target_regex);
}

void LoraConfig::set_exclude_modules(const std::string& value, const std::string& option) {
  parse_module_option(value, option, exclude_modules, exclude_regex);
}

std::vector<std::string> default_target_modules(const std::string& model_type) {
  if (model_type == "phi3") return {"qkv_proj"};
  return {"q_proj", "v_proj"};
}

double LoraConfig::scaling_for(const std::string& module) const {
  const double rank = static_cast<double>(rank_for(module));
  return alpha_for(module) / (use_rslora ? std::sqrt(rank) : rank);
}

}  // namespace vkf::peft
