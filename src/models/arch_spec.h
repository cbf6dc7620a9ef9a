// ArchSpec: everything the generic decoder needs to know about a model, as plain data parsed from
// a Hugging Face config.json (transformers v4 and v5 forms), plus the table of HF tensor names.
// Architecture-specific choices (norm kind and placement, biases, q/k norm, multipliers, rotary
// variants, sliding windows, soft-capping) are flags here; the registry (registry.h) sets them
// per model_type.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ops/activation.h"
#include "ops/rope.h"
#include "ops/rope_tables.h"

namespace vkf::models {

enum class NormKind { RMS, Layer };
// Where the norms of a block sit.
//   Pre:      x += attn(norm1(x)); x += mlp(norm2(x))                     (llama and most)
//   Sandwich: x += post1(attn(norm1(x))); x += post2(mlp(pre2(x)))        (gemma2, gemma3)
//   Post:     x += norm1(attn(x)); x += norm2(mlp(x))                     (olmo2)
//   Parallel: h = norm1(x); x += attn(h) + mlp(h)                         (cohere)
enum class NormPlacement { Pre, Sandwich, Post, Parallel };
enum class QkNorm { None, PerHead, Full };  // qwen3/gemma3: over head_dim; olmo2: over all heads
enum class MlpKind { Gated, Plain };        // act(gate)*up -> down | act(fc) -> proj

struct LayerSpec {
  bool sliding = false;  // sliding-window attention on this layer
  bool use_rope = true;  // false for NoPE layers (smollm3)
  ops::RopeConfig rope;  // this layer's rotary parameters (per layer type)
};

// HF names of the parameters; `{}` in layer names is replaced by the layer index.
struct NameTable {
  std::string embed = "model.embed_tokens.weight";
  std::string final_norm = "model.norm";
  std::string lm_head = "lm_head.weight";
  std::string layer = "model.layers.{}.";
  std::string q = "self_attn.q_proj", k = "self_attn.k_proj", v = "self_attn.v_proj";
  std::string qkv = "self_attn.qkv_proj";  // fused (phi3)
  std::string o = "self_attn.o_proj";
  std::string q_norm = "self_attn.q_norm", k_norm = "self_attn.k_norm";
  std::string gate = "mlp.gate_proj", up = "mlp.up_proj", down = "mlp.down_proj";
  std::string gate_up = "mlp.gate_up_proj";  // fused (phi3)
  std::string fc = "mlp.c_fc", proj = "mlp.c_proj";  // plain MLP (starcoder2)
  std::string norm1 = "input_layernorm", norm2 = "post_attention_layernorm";
  std::string pre_ff_norm = "pre_feedforward_layernorm", post_ff_norm = "post_feedforward_layernorm";
};

struct ArchSpec {
  std::string model_type;
  nlohmann::json config;  // the parsed config.json, kept to write it back
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_layers = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0, max_position_embeddings = 0;
  std::optional<int64_t> pad_token_id;
  bool tie_word_embeddings = false;

  NormKind norm = NormKind::RMS;
  bool norm_one_plus = false;  // gemma: x * (1 + w)
  bool norm_bias = false;      // LayerNorm with bias
  double norm_eps = 1e-6;
  NormPlacement placement = NormPlacement::Pre;

  bool qkv_bias = false, o_bias = false, fused_qkv = false;
  QkNorm qk_norm = QkNorm::None;
  ops::RopeLayout rope_layout = ops::RopeLayout::RotateHalf;
  double attn_scale = 0;    // multiplier of q·k; 0 = 1/sqrt(head_dim)
  double attn_softcap = 0;  // 0 = none
  int64_t sliding_window = 0;

  MlpKind mlp = MlpKind::Gated;
  ops::Activation act = ops::Activation::SiLU;
  bool mlp_bias = false, fused_gate_up = false;

  double embed_multiplier = 1.0;  // granite
  bool embed_scale_sqrt_hidden = false;  // gemma family
  double residual_multiplier = 1.0;      // granite
  double logits_divisor = 1.0;           // granite logits_scaling
  double logits_multiplier = 1.0;        // cohere logit_scale
  double final_softcap = 0;              // gemma2

  // Dropout probabilities, read from config.json where transformers reads them. They act only
  // while a training dropout stream is active (core/dropout_rng.h), as in transformers' train mode.
  double attention_dropout = 0;  // the attention probabilities after the softmax (every type)
  double embedding_dropout = 0;  // the embedding output (starcoder2 embedding_dropout)
  double attn_out_dropout = 0;   // the attention block's output before the residual add
                                 // (starcoder2 residual_dropout, phi3 resid_pdrop)
  double mlp_out_dropout = 0;    // the MLP's output before the residual add (starcoder2
                                 // residual_dropout, phi3 resid_pdrop, stablelm hidden_dropout)

  // Rotary defaults of the config class, used when config.json gives neither rope_parameters nor
  // rope_theta / partial_rotary_factor (transformers' default_theta and friends).
  double default_rope_theta = 10000;
  double default_local_rope_theta = 10000;  // sliding layers of gemma3
  double default_partial_rotary_factor = 1.0;

  std::vector<LayerSpec> layers;
  NameTable names;

  std::string layer_name(int64_t layer, const std::string& leaf) const;
};

// Reads config.json fields common to every decoder; `file` names the source in errors.
// Fails with a clear error naming the file and key for missing or invalid values.
struct ConfigReader {
  const nlohmann::json& j;
  std::string file;
  bool has(const char* key) const { return j.contains(key) && !j[key].is_null(); }
  int64_t integer(const char* key) const;
  int64_t integer_or(const char* key, int64_t fallback) const;
  double number(const char* key) const;
  double number_or(const char* key, double fallback) const;
  bool boolean_or(const char* key, bool fallback) const;
  double probability_or(const char* key, double fallback) const;  // a number in [0, 1]
  std::string string_or(const char* key, const std::string& fallback) const;
  [[noreturn]] void bad(const char* key, const std::string& why) const;
};

// Fills the fields every decoder shares (sizes, eps, rope, layer types, dtype check).
void parse_common(ArchSpec& spec, const ConfigReader& cfg);

// Rotary parameters for one layer type from v5 `rope_parameters` (flat or per layer type) or v4
// `rope_theta` + `rope_scaling`. `layer_type` is "full_attention" or "sliding_attention".
ops::RopeConfig parse_rope(const ConfigReader& cfg, const ArchSpec& spec, const std::string& layer_type);

}  // namespace vkf::models
