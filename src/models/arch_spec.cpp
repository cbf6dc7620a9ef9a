// config.json parsing shared by every decoder (see arch_spec.h).
#include "models/arch_spec.h"

#include <fmt/format.h>

#include "vk/error.h"

namespace vkf::models {
using nlohmann::json;

std::string ArchSpec::layer_name(int64_t layer, const std::string& leaf) const {
  std::string prefix = names.layer;
  const auto pos = prefix.find("{}");
  if (pos != std::string::npos) prefix.replace(pos, 2, std::to_string(layer));
  return prefix + leaf;
}

void ConfigReader::bad(const char* key, const std::string& why) const {
  fail("{}: field \"{}\" {}", file, key, why);
}

int64_t ConfigReader::integer(const char* key) const {
  if (!has(key)) bad(key, "is missing; it is required for this model type");
  if (!j[key].is_number_integer()) bad(key, fmt::format("must be an integer, got {}", j[key].dump()));
  return j[key].get<int64_t>();
}

int64_t ConfigReader::integer_or(const char* key, int64_t fallback) const {
  return has(key) ? integer(key) : fallback;
}

double ConfigReader::number(const char* key) const {
  if (!has(key)) bad(key, "is missing; it is required for this model type");
  if (!j[key].is_number()) bad(key, fmt::format("must be a number, got {}", j[key].dump()));
  return j[key].get<double>();
}

double ConfigReader::number_or(const char* key, double fallback) const {
  return has(key) ? number(key) : fallback;
}

double ConfigReader::probability_or(const char* key, double fallback) const {
  const double p = number_or(key, fallback);
  if (!(p >= 0.0 && p <= 1.0)) bad(key, fmt::format("must be a probability in [0, 1], got {}", p));
  return p;
}

bool ConfigReader::boolean_or(const char* key, bool fallback) const {
  if (!has(key)) return fallback;
  if (!j[key].is_boolean()) bad(key, fmt::format("must be true or false, got {}", j[key].dump()));
  return j[key].get<bool>();
}

std::string ConfigReader::string_or(const char* key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  if (!j[key].is_string()) bad(key, fmt::format("must be a string, got {}", j[key].dump()));
  return j[key].get<std::string>();
}

namespace {

// Copies the rotary fields of one parameter object (v5 rope_parameters entry or v4 rope_scaling)
// into `rope`. Unknown rope types are an error naming the key.
void read_rope_fields(const json& p, const std::string& where, ops::RopeConfig& rope) {
  auto num = [&](const char* k, double& out) {
    if (p.contains(k) && !p[k].is_null()) {
      VKF_REQUIRE(p[k].is_number(), "{}: \"{}\" must be a number, got {}", where, k, p[k].dump());
      out = p[k].get<double>();
    }
  };
  auto opt = [&](const char* k, std::optional<double>& out) {
    if (p.contains(k) && !p[k].is_null()) {
      VKF_REQUIRE(p[k].is_number(), "{}: \"{}\" must be a number, got {}", where, k, p[k].dump());
      out = p[k].get<double>();
    }
  };
  std::string type = rope.type;
  if (p.contains("rope_type") && p["rope_type"].is_string()) type = p["rope_type"].get<std::string>();
  else if (p.contains("type") && p["type"].is_string()) type = p["type"].get<std::string>();
  static const char* kTypes[] = {"default", "linear", "dynamic", "yarn", "longrope", "llama3"};
  bool known = false;
  for (const char* t : kTypes) known = known || type == t;
  VKF_REQUIRE(known, "{}: rope type \"{}\" is not supported (supported: default, linear, dynamic, "
              "yarn, longrope, llama3)", where, type);
  rope.type = type;
  num("rope_theta", rope.theta);
  num("factor", rope.factor);
  num("partial_rotary_factor", rope.partial_rotary_factor);
  num("low_freq_factor", rope.low_freq_factor);
  num("high_freq_factor", rope.high_freq_factor);
  num("beta_fast", rope.beta_fast);
  num("beta_slow", rope.beta_slow);
  opt("mscale", rope.mscale);
  opt("mscale_all_dim", rope.mscale_all_dim);
  opt("attention_factor", rope.attention_factor);
  if (p.contains("original_max_position_embeddings") && p["original_max_position_embeddings"].is_number())
    rope.original_max_position_embeddings = p["original_max_position_embeddings"].get<int64_t>();
  if (p.contains("truncate") && p["truncate"].is_boolean()) rope.truncate = p["truncate"].get<bool>();
  for (const char* k : {"short_factor", "long_factor"}) {
    if (!p.contains(k) || p[k].is_null()) continue;
    VKF_REQUIRE(p[k].is_array(), "{}: \"{}\" must be a list of numbers", where, k);
    auto& dst = std::string(k) == "short_factor" ? rope.short_factor : rope.long_factor;
    dst = p[k].get<std::vector<double>>();
  }
}

}  // namespace

ops::RopeConfig parse_rope(const ConfigReader& cfg, const ArchSpec& spec, const std::string& layer_type) {
  ops::RopeConfig rope;
  rope.head_dim = spec.head_dim;
  rope.max_position_embeddings = spec.max_position_embeddings;
  const bool local = layer_type == "sliding_attention";
  rope.theta = cfg.number_or("rope_theta", local ? spec.default_local_rope_theta : spec.default_rope_theta);
  rope.partial_rotary_factor = cfg.number_or("partial_rotary_factor", spec.default_partial_rotary_factor);
  rope.original_max_position_embeddings = cfg.integer_or("original_max_position_embeddings", 0);
  const json& j = cfg.j;
  if (cfg.has("rope_parameters")) {  // transformers v5
    const json& rp = j["rope_parameters"];
    VKF_REQUIRE(rp.is_object(), "{}: \"rope_parameters\" must be an object", cfg.file);
    const bool per_type = rp.contains("full_attention") || rp.contains("sliding_attention");
    if (per_type) {
      const std::string key = rp.contains(layer_type) ? layer_type : "full_attention";
      VKF_REQUIRE(rp.contains(key) && rp[key].is_object(),
                  "{}: \"rope_parameters\" has no entry for layer type \"{}\"", cfg.file, layer_type);
      read_rope_fields(rp[key], cfg.file + ": rope_parameters." + key, rope);
    } else {
      read_rope_fields(rp, cfg.file + ": rope_parameters", rope);
    }
  } else {  // transformers v4
    if (cfg.has("rope_scaling")) {
      VKF_REQUIRE(j["rope_scaling"].is_object(), "{}: \"rope_scaling\" must be an object", cfg.file);
      read_rope_fields(j["rope_scaling"], cfg.file + ": rope_scaling", rope);
    }
    // gemma3 v4: sliding layers use rope_local_base_freq and no scaling.
    if (layer_type == "sliding_attention" && cfg.has("rope_local_base_freq")) {
      rope.type = "default";
      rope.factor = 1.0;
      rope.theta = cfg.number("rope_local_base_freq");
    }
  }
  return rope;
}

void parse_common(ArchSpec& spec, const ConfigReader& cfg) {
  spec.vocab_size = cfg.integer("vocab_size");
  spec.hidden_size = cfg.integer("hidden_size");
  spec.num_layers = cfg.integer("num_hidden_layers");
  spec.num_heads = cfg.integer("num_attention_heads");
  spec.num_kv_heads = cfg.integer_or("num_key_value_heads", spec.num_heads);
  spec.intermediate_size = cfg.integer("intermediate_size");
  spec.max_position_embeddings = cfg.integer_or("max_position_embeddings", 2048);
  for (auto [key, v] : {std::pair{"vocab_size", spec.vocab_size}, {"hidden_size", spec.hidden_size},
                        {"num_hidden_layers", spec.num_layers}, {"num_attention_heads", spec.num_heads},
                        {"num_key_value_heads", spec.num_kv_heads},
                        {"intermediate_size", spec.intermediate_size}}) {
    if (v <= 0) cfg.bad(key, fmt::format("must be positive, got {}", v));
  }
  if (spec.num_heads % spec.num_kv_heads != 0) {
    cfg.bad("num_key_value_heads", fmt::format("({}) must divide num_attention_heads ({})",
                                               spec.num_kv_heads, spec.num_heads));
  }
  spec.head_dim = cfg.integer_or("head_dim", 0);
  if (spec.head_dim == 0) {
    if (spec.hidden_size % spec.num_heads != 0) {
      cfg.bad("head_dim", fmt::format("is absent and hidden_size ({}) is not a multiple of "
                                      "num_attention_heads ({})", spec.hidden_size, spec.num_heads));
    }
    spec.head_dim = spec.hidden_size / spec.num_heads;
  }
  if (cfg.has("pad_token_id")) spec.pad_token_id = cfg.integer("pad_token_id");
  spec.tie_word_embeddings = cfg.boolean_or("tie_word_embeddings", spec.tie_word_embeddings);
  spec.sliding_window = cfg.integer_or("sliding_window", 0);
  spec.attention_dropout = cfg.probability_or("attention_dropout", 0.0);
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (!cfg.has(key)) continue;
    const std::string d = cfg.string_or(key, "float32");
    static const char* kOk[] = {"float32", "float16", "bfloat16", "float64", "auto"};
    bool ok = false;
    for (const char* k : kOk) ok = ok || d == k;
    if (!ok) cfg.bad(key, fmt::format("is \"{}\"; vkformer reads float32, float16, bfloat16 or float64 weights", d));
  }
  // Layer types: explicit in newer configs; the registry fills them otherwise.
  spec.layers.assign(static_cast<size_t>(spec.num_layers), LayerSpec{});
  if (cfg.has("layer_types")) {
    const json& lt = cfg.j["layer_types"];
    if (!lt.is_array() || static_cast<int64_t>(lt.size()) < spec.num_layers)
      cfg.bad("layer_types", fmt::format("must list one type per layer ({} layers)", spec.num_layers));
    for (int64_t i = 0; i < spec.num_layers; ++i) {
      const std::string t = lt[static_cast<size_t>(i)].is_string() ? lt[static_cast<size_t>(i)].get<std::string>() : "";
      if (t == "sliding_attention") {
        spec.layers[i].sliding = true;
      } else if (t != "full_attention") {
        cfg.bad("layer_types", fmt::format("entry {} is \"{}\"; supported: full_attention, "
                                           "sliding_attention", i, t));
      }
    }
  }
}

}  // namespace vkf::models
