// Per-model-type configuration of the generic decoder (see registry.h). Defaults below are the
// config classes' defaults in transformers, used when config.json omits a key (save_pretrained
// omits keys equal to the defaults of the base config class).
#include "models/registry.h"

#include <fmt/format.h>

#include <fstream>
#include <functional>
#include <map>

#include "vk/error.h"

namespace vkf::models {
using nlohmann::json;

namespace {

using Configure = std::function<void(ArchSpec&, const ConfigReader&)>;

struct Entry {
  ArchInfo info;
  bool tie_default;
  Configure configure;
};

ops::Activation activation_of(const ConfigReader& c, const char* key, const char* fallback) {
  const std::string name = c.string_or(key, fallback);
  try {
    return ops::parse_activation(name);
  } catch (const Error& e) {
    c.bad(key, e.what());
  }
}

void llama_like(ArchSpec& s, const ConfigReader& c) {
  s.norm_eps = c.number_or("rms_norm_eps", 1e-6);
  const bool bias = c.boolean_or("attention_bias", false);
  s.qkv_bias = s.o_bias = bias;
  s.mlp_bias = c.boolean_or("mlp_bias", false);
  s.act = activation_of(c, "hidden_act", "silu");
}

// qwen2/qwen3: layers from max_window_layers on use the sliding window when use_sliding_window.
void qwen_sliding(ArchSpec& s, const ConfigReader& c) {
  if (c.has("layer_types")) return;
  const bool use = c.boolean_or("use_sliding_window", false);
  const int64_t from = c.integer_or("max_window_layers", s.num_layers);
  for (int64_t i = 0; i < s.num_layers; ++i) s.layers[i].sliding = use && i >= from;
}

void all_sliding_if_window(ArchSpec& s, const ConfigReader& c) {
  if (c.has("layer_types")) return;
  for (auto& l : s.layers) l.sliding = s.sliding_window > 0;
}

void reject_true(const ConfigReader& c, const char* key, const char* why) {
  if (c.boolean_or(key, false)) c.bad(key, fmt::format("= true is not supported yet ({})", why));
}

const std::vector<Entry>& entries() {
  static const std::vector<Entry> table = {
      {{"llama", "RMSNorm, SwiGLU, GQA, rope incl. llama3/yarn/dynamic/linear scaling", true}, false,
       [](ArchSpec& s, const ConfigReader& c) {
         llama_like(s, c);
         all_sliding_if_window(s, c);
       }},
      {{"mistral", "llama + sliding-window attention", true}, false,
       [](ArchSpec& s, const ConfigReader& c) {
         llama_like(s, c);
         s.qkv_bias = s.o_bias = false;
         all_sliding_if_window(s, c);
       }},
      {{"qwen2", "q/k/v bias, sliding-window layers from max_window_layers", true}, false,
       [](ArchSpec& s, const ConfigReader& c) {
         llama_like(s, c);
         s.qkv_bias = true;
         s.o_bias = false;
         qwen_sliding(s, c);
       }},
      {{"qwen3", "per-head q/k RMSNorm", false}, false,
       [](ArchSpec& s, const ConfigReader& c) {
         llama_like(s, c);
         s.qk_norm = QkNorm::PerHead;
         qwen_sliding(s, c);
       }},
      {{"gemma", "(1+w) RMSNorm, embeddings scaled by sqrt(hidden), GELU-tanh, tied head", true}, true,
       [](ArchSpec& s, const ConfigReader& c) {
         llama_like(s, c);
         s.norm_one_plus = true;
         s.embed_scale_sqrt_hidden = true;
         s.act = activation_of(c, "hidden_act", "gelu_pytorch_tanh");
       }},
      {{"gemma2", "sandwich norms, attention and final soft-capping, alternating sliding layers, "
                  "query_pre_attn_scalar", true}, true,
       [](ArchSpec& s, const ConfigReader& c) {
         llama_like(s, c);
         s.norm_one_plus = true;
         s.embed_scale_sqrt_hidden = true;
         s.placement = NormPlacement::Sandwich;
         s.act = activation_of(c, "hidden_activation", "gelu_pytorch_tanh");
         s.attn_scale = 1.0 / std::sqrt(c.number_or("query_pre_attn_scalar", 256));
         s.attn_softcap = c.number_or("attn_logit_softcapping", 0);
         s.final_softcap = c.number_or("final_logit_softcapping", 0);
         if (!c.has("layer_types"))
           for (int64_t i = 0; i < s.num_layers; ++i) s.layers[i].sliding = i % 2 == 0;
       }},
      {{"gemma3_text", "layer_types, local rope base for sliding layers, (1+w) q/k norm", true}, true,
       [](ArchSpec& s, const ConfigReader& c) {
         llama_like(s, c);
         s.norm_one_plus = true;
         s.embed_scale_sqrt_hidden = true;
         s.placement = NormPlacement::Sandwich;
         s.qk_norm = QkNorm::PerHead;
         s.default_rope_theta = 1e6;
         s.act = activation_of(c, "hidden_activation", "gelu_pytorch_tanh");
         s.attn_scale = 1.0 / std::sqrt(c.number_or("query_pre_attn_scalar", 256));
         s.attn_softcap = c.number_or("attn_logit_softcapping", 0);
         s.final_softcap = c.number_or("final_logit_softcapping", 0);
         if (!c.has("layer_types")) {
           const int64_t pattern = c.integer_or("sliding_window_pattern", 6);
           for (int64_t i = 0; i < s.num_layers; ++i) s.layers[i].sliding = (i + 1) % pattern != 0;
         }
       }},
      {{"phi3", "fused qkv and gate_up projections", true}, false,
       [](ArchSpec& s, const ConfigReader& c) {
         llama_like(s, c);
         s.qkv_bias = s.o_bias = false;
         s.fused_qkv = true;
         s.fused_gate_up = true;
         all_sliding_if_window(s, c);
         // resid_pdrop drops the attention and MLP outputs before each residual add. embd_pdrop is
         // a Phi3Config field that transformers' Phi3Model never applies (older versions built an
         // unused nn.Dropout from it), so it is not applied here either.
         s.attn_out_dropout = s.mlp_out_dropout = c.probability_or("resid_pdrop", 0.0);
       }},
      {{"olmo2", "post-norms, q/k RMSNorm over the full projections", true}, false,
       [](ArchSpec& s, const ConfigReader& c) {
         llama_like(s, c);
         s.placement = NormPlacement::Post;
         s.qk_norm = QkNorm::Full;
         s.names.norm1 = "post_attention_layernorm";
         s.names.norm2 = "post_feedforward_layernorm";
       }},
      {{"granite", "embedding/residual/attention multipliers, logits scaling", true}, false,
       [](ArchSpec& s, const ConfigReader& c) {
         llama_like(s, c);
         s.embed_multiplier = c.number_or("embedding_multiplier", 1.0);
         s.residual_multiplier = c.number_or("residual_multiplier", 1.0);
         s.attn_scale = c.number_or("attention_multiplier", 1.0);
         s.logits_divisor = c.number_or("logits_scaling", 1.0);
       }},
      {{"smollm3", "NoPE layers (no_rope_layers)", false}, true,
       [](ArchSpec& s, const ConfigReader& c) {
         llama_like(s, c);
         s.default_rope_theta = 2e6;
         if (c.has("no_rope_layers")) {
           const json& n = c.j["no_rope_layers"];
           if (!n.is_array() || static_cast<int64_t>(n.size()) < s.num_layers)
             c.bad("no_rope_layers", "must list 0/1 for every layer");
           for (int64_t i = 0; i < s.num_layers; ++i)
             s.layers[i].use_rope = n[static_cast<size_t>(i)].get<int64_t>() != 0;
         } else {
           const int64_t every = c.integer_or("no_rope_layer_interval", 4);
           for (int64_t i = 0; i < s.num_layers; ++i) s.layers[i].use_rope = (i + 1) % every != 0;
         }
         qwen_sliding(s, c);
       }},
      {{"stablelm", "LayerNorm with bias, partial rotary, q/k/v bias", false}, false,
       [](ArchSpec& s, const ConfigReader& c) {
         s.norm = NormKind::Layer;
         s.norm_bias = true;
         s.norm_eps = c.number_or("layer_norm_eps", 1e-5);
         s.default_partial_rotary_factor = 0.25;
         s.qkv_bias = c.boolean_or("use_qkv_bias", false);
         s.act = activation_of(c, "hidden_act", "silu");
         if (c.boolean_or("use_parallel_residual", false)) s.placement = NormPlacement::Parallel;
         reject_true(c, "qk_layernorm", "per-head LayerNorm of stablelm");
         // hidden_dropout acts on the MLP output only (StableLmDecoderLayer, both residual forms).
         s.mlp_out_dropout = c.probability_or("hidden_dropout", 0.0);
       }},
      {{"cohere", "LayerNorm without bias, parallel attention+MLP, interleaved rope, logit scale", true},
       true,
       [](ArchSpec& s, const ConfigReader& c) {
         s.norm = NormKind::Layer;
         s.norm_bias = false;
         s.norm_eps = c.number_or("layer_norm_eps", 1e-5);
         s.placement = NormPlacement::Parallel;
         s.rope_layout = ops::RopeLayout::Interleaved;
         s.default_rope_theta = 500000;
         s.qkv_bias = s.o_bias = c.boolean_or("attention_bias", false);
         s.act = activation_of(c, "hidden_act", "silu");
         s.logits_multiplier = c.number_or("logit_scale", 0.0625);
         reject_true(c, "use_qk_norm", "cohere's per-head LayerNorm");
       }},
      {{"starcoder2", "LayerNorm with bias, GELU MLP with biases, sliding window", true}, true,
       [](ArchSpec& s, const ConfigReader& c) {
         s.norm = NormKind::Layer;
         s.norm_bias = true;
         s.norm_eps = c.number_or("norm_epsilon", 1e-5);
         const bool bias = c.boolean_or("use_bias", true);
         s.qkv_bias = s.o_bias = s.mlp_bias = bias;
         s.mlp = MlpKind::Plain;
         s.act = activation_of(c, "hidden_act", "gelu_pytorch_tanh");
         all_sliding_if_window(s, c);
         // residual_dropout after o_proj and after the MLP's c_proj; embedding_dropout after the
         // embedding.
         s.attn_out_dropout = s.mlp_out_dropout = c.probability_or("residual_dropout", 0.0);
         s.embedding_dropout = c.probability_or("embedding_dropout", 0.0);
       }},
  };
  return table;
}

std::string supported_list() {
  std::string out;
  for (const auto& e : entries()) out += (out.empty() ? "" : ", ") + e.info.model_type;
  return out;
}

}  // namespace

const std::vector<ArchInfo>& supported_architectures() {
  static const std::vector<ArchInfo> list = [] {
    std::vector<ArchInfo> v;
    for (const auto& e : entries()) v.push_back(e.info);
    return v;
  }();
  return list;
}

ArchSpec spec_from_config(const json& config, const std::string& file) {
  VKF_REQUIRE(config.is_object(), "{}: must hold a JSON object", file);
  ConfigReader c{config, file};
  const std::string type = c.string_or("model_type", "");
  VKF_REQUIRE(!type.empty(), "{}: field \"model_type\" is missing; supported model types: {}", file,
              supported_list());
  const Entry* entry = nullptr;
  for (const auto& e : entries())
    if (e.info.model_type == type) entry = &e;
  VKF_REQUIRE(entry, "{}: model_type \"{}\" is not supported; supported model types: {}", file, type,
              supported_list());
  ArchSpec s;
  s.model_type = type;
  s.config = config;
  s.tie_word_embeddings = entry->tie_default;
  parse_common(s, c);
  entry->configure(s, c);
  for (auto& layer : s.layers) {
    layer.rope = parse_rope(c, s, layer.sliding ? "sliding_attention" : "full_attention");
    if (layer.sliding && s.sliding_window <= 0) {
      c.bad("sliding_window", "must be a positive window when layers use sliding attention");
    }
    const int64_t rot = ops::rope_rotary_dim(layer.rope);
    if (layer.use_rope && (rot <= 0 || rot % 2 != 0 || rot > s.head_dim)) {
      c.bad("partial_rotary_factor", fmt::format("gives {} rotary dimensions for head_dim {}; need an "
                                                 "even number in 2..head_dim", rot, s.head_dim));
    }
  }
  return s;
}

ArchSpec spec_from_file(const std::string& path) {
  std::ifstream in(path);
  VKF_REQUIRE(in, "{}: cannot open; a model folder needs a config.json", path);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({})", path, e.what());
  }
  return spec_from_config(j, path);
}

}  // namespace vkf::models
