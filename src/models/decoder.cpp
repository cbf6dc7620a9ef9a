// The generic decoder's forward pass, its layers, heads and the decode step (see decoder.h; its
// parameters, loading and saving are in decoder_params.cpp).
#include "models/decoder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/activation_checkpoint.h"
#include "core/autograd.h"
#include "core/dropout_rng.h"
#include "nn/linear.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/decode.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embed.h"
#include "ops/gated_projection.h"
#include "ops/linear_group.h"
#include "ops/matmul.h"
#include "ops/matmul_kernels.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "ops/rope_tables.h"
#include "ops/softcap.h"
#include "vk/error.h"

namespace vkf::models {

namespace {
// "model.embed_tokens.weight" -> "model.embed_tokens"
std::string module_of(const std::string& param_name) {
  const size_t dot = param_name.rfind('.');
  return dot == std::string::npos ? param_name : param_name.substr(0, dot);
}
}  // namespace

namespace {
bool& projection_grouping_slot() {
  static bool on = [] {
    const char* env = std::getenv("VKF_GROUP_PROJECTIONS");
    return !(env && (std::string(env) == "off" || std::string(env) == "0"));
  }();
  return on;
}

bool& decode_head_norm_fold_slot() {
  static bool on = true;
  return on;
}
bool& decode_head_argmax_fold_slot() {
  static bool on = true;
  return on;
}
}  // namespace

void DecoderModel::set_decode_head_norm_fold(bool on) { decode_head_norm_fold_slot() = on; }
void DecoderModel::set_decode_head_argmax_fold(bool on) { decode_head_argmax_fold_slot() = on; }

void DecoderModel::set_projection_grouping(bool on) { projection_grouping_slot() = on; }
bool DecoderModel::projection_grouping() { return projection_grouping_slot(); }

bool DecoderModel::groups_projections_of(int64_t widest_output) {
  return projection_grouping() && ops::detail::f16_operands_active() &&
         widest_output <= kGroupedProjectionRows;
}

bool DecoderModel::groups_projections(const ops::RowNorm* pre_norm,
                                      std::initializer_list<Tensor> weights) {
  if (pre_norm != nullptr || nn::active_adapter() != nullptr) return false;
  int64_t widest = 0;
  for (const Tensor& w : weights) {
    if (w.dtype() != DType::F32) return false;
    widest = std::max(widest, w.dim(0));
  }
  return groups_projections_of(widest);
}

Tensor DecoderModel::norm(const Tensor& x, const std::string& prefix) const {
  const Tensor& w = param(prefix + ".weight");
  const float eps = static_cast<float>(spec_.norm_eps);
  if (spec_.norm == NormKind::RMS) return ops::rms_norm(x, w, eps, spec_.norm_one_plus);
  const Tensor b = spec_.norm_bias ? param(prefix + ".bias") : Tensor();
  return ops::layer_norm(x, w, b, eps);
}

ops::RowNorm DecoderModel::row_norm(const std::string& prefix) const {
  return {param(prefix + ".weight"), static_cast<float>(spec_.norm_eps), spec_.norm_one_plus};
}

const Tensor& DecoderModel::rope_table(int64_t layer, int64_t positions, bool cos) {
  const ops::RopeConfig& r = spec_.layers[static_cast<size_t>(layer)].rope;
  std::string key = fmt::format("{}|{}|{}|{}|{}", r.type, r.theta, r.factor, r.partial_rotary_factor,
                                r.original_max_position_embeddings);
  for (double f : r.short_factor) key += fmt::format(",{}", f);
  key += "|";
  for (double f : r.long_factor) key += fmt::format(",{}", f);
  // Dynamic and longrope frequencies depend on the sequence length, so their table is rebuilt when
  // it changes. For the others every row depends on its position only: one table, grown by
  // doubling, serves every shorter call (incremental decoding reuses it step after step).
  const bool length_dependent = r.type == "dynamic" || r.type == "longrope";
  RopeTable& t = rope_cache_[key];
  const bool fits = length_dependent ? t.positions == positions : t.positions >= positions;
  if (!fits) {
    int64_t rows = positions;
    if (!length_dependent) {
      rows = std::max<int64_t>(64, t.positions);
      while (rows < positions) rows *= 2;
    }
    const auto cs = ops::rope_cos_sin(ops::rope_inv_freq(r, positions), rows);
    t = {rows, cs.cos, cs.sin};
  }
  return cos ? t.cos : t.sin;
}

struct DecoderModel::Step {
  Tensor mask;               // [B, keys] or undefined
  int64_t T = 0;             // new positions in this call
  Tensor positions;          // I32 [1, T] or [B, T]
  int64_t table_positions = 0;  // rope tables must cover positions 0..table_positions-1
  KVCache* cache = nullptr;
  const DecodeInputs* decode = nullptr;  // decode_step(): slots and lengths read on the device
  // Layer 0 of a decode step (run_layers): its q, k and v products read the token's embedding row
  // themselves, the q product storing it into the residual stream.
  const ops::EmbeddedInput* embedded = nullptr;
};

KVCache DecoderModel::make_cache(int64_t batch, int64_t capacity) const {
  VKF_REQUIRE(batch > 0 && capacity > 0, "make_cache: batch and capacity must be positive");
  KVCache c;
  c.batch = batch;
  c.capacity = capacity;
  for (int64_t l = 0; l < spec_.num_layers; ++l) {
    c.k.push_back(Tensor::zeros({batch, capacity, spec_.num_kv_heads, spec_.head_dim}));
    c.v.push_back(Tensor::zeros({batch, capacity, spec_.num_kv_heads, spec_.head_dim}));
  }
  return c;
}

Tensor DecoderModel::attention_block(int64_t l, const Tensor& h, const Step& step,
                                     const Trace& trace, const Tensor* residual,
                                     const ops::RowNorm* pre_norm) {
  const int64_t T = step.T;
  const auto& s = spec_;
  const auto& n = s.names;
  auto L = [&](const std::string& leaf) { return s.layer_name(l, leaf); };
  auto P = [&](const std::string& leaf) { return param(L(leaf)); };
  auto bias = [&](const std::string& proj, bool has) { return has ? P(proj + ".bias") : Tensor(); };
  auto emit = [&](const std::string& what, const Tensor& t) {
    if (trace) trace(fmt::format("layers.{}.attn.{}", l, what), t);
  };
  const int64_t B = h.dim(0), D = s.head_dim, Hq = s.num_heads, Hkv = s.num_kv_heads;
  // An input projection: with pre_norm (a decode step: no adapter, no trace) the norm folds in.
  auto in_proj = [&](const std::string& proj, const Tensor& b) {
    if (pre_norm && step.embedded)
      return ops::normed_linear_of_embedding(*step.embedded, proj == n.q, *pre_norm,
                                             P(proj + ".weight"), b);
    if (pre_norm) return ops::normed_linear(h, *pre_norm, P(proj + ".weight"), b);
    return nn::linear(L(proj), h, P(proj + ".weight"), b);
  };
  Tensor q, k, v;
  {
    // Mixed precision: the q, k and v products (and their adapters) convert h to f16 once.
    const ops::SharedF16Inputs shared_h;
    if (s.fused_qkv) {
      // phi3 stores the q, k and v rows one after another in qkv_proj.
      Tensor qkv = in_proj(n.qkv, Tensor());
      q = qkv.slice(2, 0, Hq * D).contiguous();
      k = qkv.slice(2, Hq * D, (Hq + Hkv) * D).contiguous();
      v = qkv.slice(2, (Hq + Hkv) * D, (Hq + 2 * Hkv) * D).contiguous();
    } else if (groups_projections(pre_norm, {P(n.q + ".weight"), P(n.k + ".weight"),
                                             P(n.v + ".weight")})) {
      // One product for q, k and v (ops::linear_split): each output the same sum as below; the
      // input gradient one product over the three instead of three adding into one.
      std::vector<Tensor> b;
      if (s.qkv_bias) b = {P(n.q + ".bias"), P(n.k + ".bias"), P(n.v + ".bias")};
      auto qkv =
          ops::linear_split(h, {P(n.q + ".weight"), P(n.k + ".weight"), P(n.v + ".weight")}, b);
      q = std::move(qkv[0]);
      k = std::move(qkv[1]);
      v = std::move(qkv[2]);
    } else {
      q = in_proj(n.q, bias(n.q, s.qkv_bias));
      k = in_proj(n.k, bias(n.k, s.qkv_bias));
      v = in_proj(n.v, bias(n.v, s.qkv_bias));
    }
  }
  const float eps = static_cast<float>(s.norm_eps);
  if (s.qk_norm == QkNorm::Full) {  // olmo2: over every head at once, before the head split
    q = ops::rms_norm(q, P(n.q_norm + ".weight"), eps);
    k = ops::rms_norm(k, P(n.k_norm + ".weight"), eps);
  }
  q = q.reshape({B, T, Hq, D});
  k = k.reshape({B, T, Hkv, D});
  v = v.reshape({B, T, Hkv, D});
  if (s.qk_norm == QkNorm::PerHead) {
    q = ops::rms_norm(q, P(n.q_norm + ".weight"), eps, s.norm_one_plus);
    k = ops::rms_norm(k, P(n.k_norm + ".weight"), eps, s.norm_one_plus);
  }
  emit("q", q);
  emit("k", k);
  emit("v", v);
  const LayerSpec& layer = s.layers[static_cast<size_t>(l)];
  if (step.decode) {
    // Rotary layers rotate and append inside the attention dispatch below; others append here.
    if (!layer.use_rope)
      ops::kv_cache_write(k, v, step.cache->k[static_cast<size_t>(l)],
                          step.cache->v[static_cast<size_t>(l)], step.decode->cached);
  } else if (layer.use_rope) {
    const int64_t rot = ops::rope_rotary_dim(layer.rope);
    const Tensor& cos = rope_table(l, step.table_positions, true);
    const Tensor& sin = rope_table(l, step.table_positions, false);
    q = ops::apply_rope(q, cos, sin, step.positions, rot, s.rope_layout);
    k = ops::apply_rope(k, cos, sin, step.positions, rot, s.rope_layout);
    emit("q_rope", q);
    emit("k_rope", k);
  }
  if (step.cache && !step.decode) {
    // Append this call's keys/values and attend over every cached position.
    KVCache& c = *step.cache;
    const int64_t end = c.length + T;
    c.k[static_cast<size_t>(l)].slice(1, c.length, end).copy_(k);
    c.v[static_cast<size_t>(l)].slice(1, c.length, end).copy_(v);
    k = c.k[static_cast<size_t>(l)].slice(1, 0, end);
    v = c.v[static_cast<size_t>(l)].slice(1, 0, end);
  }
  ops::AttentionOptions opts;
  opts.scale = static_cast<float>(s.attn_scale > 0 ? s.attn_scale : 1.0 / std::sqrt(static_cast<double>(D)));
  opts.causal = true;
  opts.sliding_window = layer.sliding ? s.sliding_window : 0;
  opts.softcap = static_cast<float>(s.attn_softcap);
  if (s.attention_dropout > 0) {
    // One counter per element of the [B, Hq, T, keys] probability matrix.
    const int64_t keys = k.dim(1);
    if (const auto r = dropout_rng::reserve(static_cast<uint64_t>(B * Hq * T * keys))) {
      opts.dropout_p = static_cast<float>(s.attention_dropout);
      opts.dropout_seed = r->seed;
      opts.dropout_offset = r->offset;
    }
  }
  Tensor a;
  if (step.decode) {
    // The key count and the slot of the new key come from the device (decode_step()). Rotary
    // layers rotate q and k, append k and v at that slot and attend, in one dispatch.
    const Tensor& ck = step.cache->k[static_cast<size_t>(l)];
    const Tensor& cv = step.cache->v[static_cast<size_t>(l)];
    if (layer.use_rope) {
      a = ops::attention_decode_rope(q, k, v, rope_table(l, step.table_positions, true),
                                     rope_table(l, step.table_positions, false), step.positions,
                                     ck, cv, step.decode->cached, step.mask, opts,
                                     ops::rope_rotary_dim(layer.rope), s.rope_layout);
    } else {
      a = ops::attention_decode(q, ck, cv, step.mask, step.decode->cached, opts);
    }
  } else {
    a = ops::attention(q, k, v, step.mask, opts);
  }
  emit("context", a);
  a = a.reshape({B, T, Hq * D});
  if (residual) {
    ops::linear_accumulate(a, P(n.o + ".weight"), bias(n.o, s.o_bias), *residual);
    return {};
  }
  Tensor o = nn::linear(L(n.o), a, P(n.o + ".weight"), bias(n.o, s.o_bias));
  emit("out", o);
  return ops::train_dropout(o, static_cast<float>(s.attn_out_dropout));
}

Tensor DecoderModel::mlp_block(int64_t l, const Tensor& x, const Trace& trace,
                               const Tensor* residual, const ops::RowNorm* pre_norm) const {
  const auto& s = spec_;
  const auto& n = s.names;
  auto L = [&](const std::string& leaf) { return s.layer_name(l, leaf); };
  auto P = [&](const std::string& leaf) { return param(L(leaf)); };
  auto bias = [&](const std::string& proj) { return s.mlp_bias ? P(proj + ".bias") : Tensor(); };
  // The block's normalized input, where a path below needs it as a tensor.
  auto normalized = [&] {
    return pre_norm ? ops::rms_norm(x, pre_norm->weight, pre_norm->eps, pre_norm->one_plus) : x;
  };
  // The last projection: into a new tensor, or added into the residual stream in place.
  auto project = [&](const std::string& proj, const Tensor& a, const Tensor& b) {
    if (!residual) return nn::linear(L(proj), a, P(proj + ".weight"), b);
    ops::linear_accumulate(a, P(proj + ".weight"), b, *residual);
    return Tensor();
  };
  // act(gate) * up from one gate_up product, then the down projection. Mixed precision on tensor
  // cores stores the activation in f16 for the down products (ops::gated_projection; the same
  // bits as the composed form, with half the bytes kept for the backward).
  auto gated_down = [&](const Tensor& gu, const Tensor& b) {
    const Tensor w = P(n.down + ".weight");
    if (!residual && !nn::active_adapter() && ops::gated_projection_applies(gu, w, b))
      return ops::gated_projection(gu, s.act, true, w);
    return project(n.down, ops::gated_act_fused(gu, s.act, true), b);
  };
  Tensor out;
  if (s.mlp == MlpKind::Plain) {
    Tensor a =
        ops::activation(nn::linear(L(n.fc), normalized(), P(n.fc + ".weight"), bias(n.fc)), s.act);
    out = project(n.proj, a, bias(n.proj));
  } else if (s.fused_gate_up) {
    Tensor gu = nn::linear(L(n.gate_up), normalized(), P(n.gate_up + ".weight"));
    out = gated_down(gu, Tensor());
  } else if (residual && !s.mlp_bias) {
    // A folded decode step has no adapter or trace on these projections: both products and the
    // activation (and the norm, with pre_norm) in one pass over the two weights
    // (ops::gated_linear; same sums as below).
    out = project(n.down,
                  ops::gated_linear(x, P(n.gate + ".weight"), P(n.up + ".weight"), s.act, pre_norm),
                  Tensor());
  } else if (groups_projections(pre_norm, {P(n.gate + ".weight"), P(n.up + ".weight")})) {
    // One product for gate and up (ops::linear_concat), whose two halves the fused activation
    // reads: each output the same sum and formula as the separate form below.
    const Tensor xn = normalized(), wg = P(n.gate + ".weight"), wu = P(n.up + ".weight"),
                 wd = P(n.down + ".weight");
    if (!residual && !nn::active_adapter() && !s.mlp_bias &&
        ops::gated_mlp_applies(xn, wg, wu, wd, true)) {
      // Mixed precision on tensor cores: the whole MLP as one op, whose activation and gate/up
      // gradient are stored in f16 for the products that read them (the same bits).
      out = ops::gated_mlp(xn, wg, wu, wd, s.act, true);
    } else {
      std::vector<Tensor> b;
      if (s.mlp_bias) b = {P(n.gate + ".bias"), P(n.up + ".bias")};
      out = gated_down(ops::linear_concat(xn, {wg, wu}, b), bias(n.down));
    }
  } else if (const Tensor h = normalized();
             !residual && !nn::active_adapter() && !s.mlp_bias &&
             ops::gated_mlp_applies(h, P(n.gate + ".weight"), P(n.up + ".weight"),
                                    P(n.down + ".weight"), false)) {
    // The same one op with gate and up as two products (the same bits as below).
    out = ops::gated_mlp(h, P(n.gate + ".weight"), P(n.up + ".weight"), P(n.down + ".weight"),
                         s.act, false);
  } else {
    Tensor g, u;
    {
      const ops::SharedF16Inputs shared_h;  // mixed precision: h converted to f16 once
      g = nn::linear(L(n.gate), h, P(n.gate + ".weight"), bias(n.gate));
      u = nn::linear(L(n.up), h, P(n.up + ".weight"), bias(n.up));
    }
    out = project(n.down, ops::gated_act(g, u, s.act), bias(n.down));
  }
  if (residual) return {};
  if (trace) trace(fmt::format("layers.{}.mlp.out", l), out);
  return ops::train_dropout(out, static_cast<float>(s.mlp_out_dropout));
}

bool DecoderModel::layer_folds_norms(int64_t l, const Tensor& x, const Step& step,
                                     const Trace& trace) const {
  const auto& s = spec_;
  return step.decode && !trace && !nn::active_adapter() && !dropout_rng::active_stream() &&
         s.residual_multiplier == 1.0 && s.placement == NormPlacement::Pre &&
         s.norm == NormKind::RMS && !s.fused_qkv &&
         ops::norm_folds(x, param(s.layer_name(l, s.names.q + ".weight")),
                         row_norm(s.layer_name(l, s.names.norm1)));
}

Tensor DecoderModel::layer(int64_t l, Tensor x, const Step& step, const Trace& trace) {
  const auto& s = spec_;
  const auto& n = s.names;
  auto L = [&](const std::string& leaf) { return s.layer_name(l, leaf); };
  auto emit = [&](const std::string& name, const Tensor& t) {
    if (trace) trace(name, t);
  };
  const float res_mult = static_cast<float>(s.residual_multiplier);
  auto scaled = [&](const Tensor& t) { return res_mult == 1.0f ? t : ops::scale(t, res_mult); };
  // In a decode step (no tape, no trace, no adapter hooking the projections), the output
  // projections of pre-norm and parallel layers add straight into the residual stream x (which
  // this layer owns): one dispatch and one barrier fewer per residual. The same sums (a projection
  // bias is added after the residual rather than before).
  const bool fold = step.decode && !trace && !nn::active_adapter() &&
                    !dropout_rng::active_stream() && res_mult == 1.0f &&
                    (s.placement == NormPlacement::Pre || s.placement == NormPlacement::Parallel);
  if (layer_folds_norms(l, x, step, trace)) {
    // Each RMSNorm folds into the products that read it (ops::normed_linear): x itself goes in.
    const ops::RowNorm norm1 = row_norm(L(n.norm1)), norm2 = row_norm(L(n.norm2));
    attention_block(l, x, step, trace, &x, &norm1);
    mlp_block(l, x, trace, &x, &norm2);
    return x;
  }
  if (fold) {
    const Tensor h = norm(x, L(n.norm1));
    attention_block(l, h, step, trace, &x);
    mlp_block(l, s.placement == NormPlacement::Pre ? norm(x, L(n.norm2)) : h, trace, &x);
    return x;
  }
  switch (s.placement) {
    case NormPlacement::Pre: {
      Tensor a = attention_block(l, norm(x, L(n.norm1)), step, trace);
      x = ops::residual_add(x, scaled(a));
      emit(fmt::format("layers.{}.attn_residual", l), x);
      Tensor m = mlp_block(l, norm(x, L(n.norm2)), trace);
      x = ops::residual_add(x, scaled(m));
      break;
    }
    case NormPlacement::Sandwich: {
      Tensor a = attention_block(l, norm(x, L(n.norm1)), step, trace);
      x = ops::residual_add(x, norm(a, L(n.norm2)));
      emit(fmt::format("layers.{}.attn_residual", l), x);
      Tensor m = mlp_block(l, norm(x, L(n.pre_ff_norm)), trace);
      x = ops::residual_add(x, norm(m, L(n.post_ff_norm)));
      break;
    }
    case NormPlacement::Post: {
      Tensor a = attention_block(l, x, step, trace);
      x = ops::residual_add(x, norm(a, L(n.norm1)));
      emit(fmt::format("layers.{}.attn_residual", l), x);
      Tensor m = mlp_block(l, x, trace);
      x = ops::residual_add(x, norm(m, L(n.norm2)));
      break;
    }
    case NormPlacement::Parallel: {
      Tensor h = norm(x, L(n.norm1));
      Tensor a = attention_block(l, h, step, trace);
      Tensor m = mlp_block(l, h, trace);
      x = ops::residual_add(ops::residual_add(x, a), m);  // transformers' order of the sums
      break;
    }
  }
  return x;
}

Tensor DecoderModel::forward(const Tensor& input_ids, const Tensor& attention_mask,
                             const Trace& trace, KVCache* cache, std::span<const int32_t> positions,
                             bool last_only) {
  const nn::AdapterScope adapter_scope(effective_adapter());
  Tensor hidden = hidden_states(input_ids, attention_mask, trace, cache, positions);
  // The final norm works per position, so the last position of its output is what a norm of the
  // last position alone would give.
  const int64_t T = input_ids.dim(1);
  if (last_only && T > 1) hidden = hidden.slice(1, T - 1, T).contiguous();
  Tensor logits = apply_head(head_input(std::move(hidden)), trace);
  // hidden_states() attended over the cache and appended this call's keys and values; the new
  // positions count from here on (and only here: decode_step() leaves the count to its caller).
  if (cache) cache->length += T;
  return logits;
}

Tensor DecoderModel::apply_head(const HeadInput& head, const Trace& trace,
                                const ops::RowNorm* pre_norm) const {
  const auto& s = spec_;
  Tensor logits = pre_norm ? ops::normed_linear(head.hidden, *pre_norm, head.weight)
                           : nn::linear(kHeadModule, head.hidden, head.weight);
  if (s.logits_divisor != 1.0) logits = ops::scale(logits, static_cast<float>(1.0 / s.logits_divisor));
  if (s.logits_multiplier != 1.0) logits = ops::scale(logits, static_cast<float>(s.logits_multiplier));
  if (s.final_softcap > 0) logits = ops::softcap(logits, static_cast<float>(s.final_softcap));
  if (trace) trace("logits", logits);
  return logits;
}

bool DecoderModel::lora_on_head() const {
  const nn::ModuleAdapter* adapter = effective_adapter();
  return adapter && adapter->adapts_linear(kHeadModule);
}

DecoderModel::HeadInput DecoderModel::forward_hidden(const Tensor& input_ids, const Tensor& attention_mask) {
  VKF_REQUIRE(!lora_on_head(), "{} forward_hidden: the active adapter puts LoRA on the LM head, which "
              "only forward() applies; use forward() and the logits", spec_.model_type);
  const nn::AdapterScope adapter_scope(effective_adapter());
  return head_input(hidden_states(input_ids, attention_mask, {}, nullptr, {}));
}

DecoderModel::HeadInput DecoderModel::head_input(Tensor hidden) const {
  const auto& s = spec_;
  // A tied head is the base embedding matrix even when an adapter keeps its own copy of the
  // embedding (peft's modules_to_save copies the module, not the tie); an adapter copy of the
  // head itself ("lm_head.weight") replaces it.
  const nn::ModuleAdapter* adapter = nn::active_adapter();
  const Tensor* head_copy = adapter ? adapter->replacement(s.names.lm_head) : nullptr;
  HeadInput h;
  h.hidden = std::move(hidden);
  h.weight = head_copy ? *head_copy
             : s.tie_word_embeddings ? params_.at(s.names.embed)
                                     : param(s.names.lm_head);
  // forward() scales twice when both are set (no registered architecture does): then this one
  // f32 factor may differ from the two roundings by an ulp.
  const float divide = s.logits_divisor != 1.0 ? static_cast<float>(1.0 / s.logits_divisor) : 1.0f;
  const float multiply = s.logits_multiplier != 1.0 ? static_cast<float>(s.logits_multiplier) : 1.0f;
  h.logit_scale = divide * multiply;
  h.softcap = s.final_softcap > 0 ? static_cast<float>(s.final_softcap) : 0.0f;
  return h;
}

Tensor DecoderModel::hidden_states(const Tensor& input_ids, const Tensor& attention_mask, const Trace& trace,
                                   KVCache* cache, std::span<const int32_t> positions) {
  const auto& s = spec_;
  VKF_REQUIRE(input_ids.defined() && input_ids.rank() == 2 &&
                  (input_ids.dtype() == DType::I32 || input_ids.dtype() == DType::I64),
              "{} forward: input_ids must be an integer tensor [batch, seq]", s.model_type);
  const int64_t B = input_ids.dim(0), T = input_ids.dim(1);
  VKF_REQUIRE(B > 0 && T > 0, "{} forward: empty batch {}", s.model_type, shape_str(input_ids.shape()));
  const int64_t past = cache ? cache->length : 0;
  if (cache) {
    VKF_REQUIRE(!autograd::active_tape(), "{} forward: a KV cache is for inference (no gradients)",
                s.model_type);
    VKF_REQUIRE(cache->batch == B && past + T <= cache->capacity,
                "{} forward: the KV cache holds batch {} x {} positions; this call needs batch {} and "
                "{} positions", s.model_type, cache->batch, cache->capacity, B, past + T);
  }
  if (attention_mask.defined()) {
    VKF_REQUIRE(attention_mask.rank() == 2 && attention_mask.dim(0) == B && attention_mask.dim(1) == past + T,
                "{} forward: attention_mask {} must be [batch, {}] (past + new positions)",
                s.model_type, shape_str(attention_mask.shape()), past + T);
  }
  Step step;
  step.mask = attention_mask;
  step.T = T;
  step.cache = cache;
  if (positions.empty()) {
    // Without a cache the positions are 0..T-1, kept per length: a training step then uploads
    // nothing (and so can be captured and replayed, train/step_runner.h).
    Tensor& kept = past == 0 ? arange_positions_[T] : step.positions;
    if (!kept.defined()) {
      std::vector<int32_t> pos(static_cast<size_t>(T));
      for (int64_t t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>(past + t);
      kept = Tensor::from_host_i32(pos, {1, T});
    }
    step.positions = kept;
    step.table_positions = past + T;
  } else {
    VKF_REQUIRE(static_cast<int64_t>(positions.size()) == B * T,
                "{} forward: {} positions for a [{}, {}] batch", s.model_type, positions.size(), B, T);
    int32_t top = 0;
    for (int32_t p : positions) {
      VKF_REQUIRE(p >= 0, "{} forward: negative position {}", s.model_type, p);
      top = std::max(top, p);
    }
    step.positions = Tensor::from_host_i32(positions, {B, T});
    step.table_positions = top + 1;
  }
  return run(input_ids, step, trace);
}

std::string DecoderModel::decode_step_unsupported() const {
  for (const auto& layer : spec_.layers) {
    if (layer.use_rope && (layer.rope.type == "dynamic" || layer.rope.type == "longrope"))
      return fmt::format("its '{}' rotary frequencies depend on the sequence length",
                         layer.rope.type);
  }
  return "";
}

ops::EmbeddedInput DecoderModel::decode_embedded_input(const Tensor& ids) const {
  const Tensor& table = param(spec_.names.embed);
  if (ids.numel() != 1 || table.dtype() != DType::F16 || !table.is_contiguous() ||
      spec_.embed_scale_sqrt_hidden || spec_.embed_multiplier != 1.0)
    return {};
  return ops::make_embedded_input(table, ids, Tensor::empty({1, 1, spec_.hidden_size}));
}

void DecoderModel::prepare_decode(const KVCache& cache) {
  for (int64_t l = 0; l < spec_.num_layers; ++l) {
    if (!spec_.layers[static_cast<size_t>(l)].use_rope) continue;
    rope_table(l, cache.capacity, true);  // as decode_step's table_positions
    rope_table(l, cache.capacity, false);
  }
}

Tensor DecoderModel::decode_step(const DecodeInputs& in, KVCache& cache, Tensor* greedy_ids) {
  const auto& s = spec_;
  const std::string why = decode_step_unsupported();
  VKF_REQUIRE(why.empty(), "{} decode_step: not available for this model: {}", s.model_type, why);
  VKF_REQUIRE(!autograd::active_tape(),
              "{} decode_step: a KV cache is for inference (no gradients)", s.model_type);
  const int64_t B = cache.batch;
  VKF_REQUIRE(B > 0 && !cache.k.empty(),
              "{} decode_step: the KV cache is empty; make it with make_cache()", s.model_type);
  const Shape column{B, 1};
  for (const auto& [t, what] : {std::pair{&in.ids, "ids"}, {&in.positions, "positions"}}) {
    VKF_REQUIRE(t->defined() && t->dtype() == DType::I32 && t->shape() == column,
                "{} decode_step: {} must be I32 [{}, 1] (one per cache row)", s.model_type, what,
                B);
  }
  VKF_REQUIRE(in.cached.defined() && in.cached.dtype() == DType::I32 && in.cached.numel() >= 1,
              "{} decode_step: cached must be an I32 tensor (element 0: positions in the cache)",
              s.model_type);
  VKF_REQUIRE(!in.mask.defined() ||
                  (in.mask.dtype() == DType::I32 && in.mask.shape() == (Shape{B, cache.capacity})),
              "{} decode_step: mask must be I32 [{}, {}] (every cache slot)", s.model_type, B,
              cache.capacity);
  VKF_REQUIRE(!in.advance || greedy_ids,
              "{} decode_step: inputs advanced on the device need the greedy ids", s.model_type);
  Step step;
  step.mask = in.mask;
  step.T = 1;
  step.positions = in.positions;
  step.table_positions = cache.capacity;  // every position the cache can hold
  step.cache = &cache;
  step.decode = &in;
  // The adapter and the head as forward() applies them.
  const nn::AdapterScope adapter_scope(effective_adapter());
  const Tensor x = run_layers(in.ids, step, {});
  // Without an adapter, the final RMSNorm folds into the head's product as the layers' norms fold
  // into theirs (ops::normed_linear, at batch 1): one dispatch and one dependent stage fewer.
  HeadInput head = head_input(x);
  const ops::RowNorm final_norm = row_norm(s.names.final_norm);
  if (decode_head_norm_fold_slot() && s.norm == NormKind::RMS && !nn::active_adapter() &&
      ops::norm_folds(x, head.weight, final_norm)) {
    // With nothing after the head's product (no scale, no soft-cap: either could make ties), the
    // greedy choice comes from the product itself.
    if (greedy_ids && decode_head_argmax_fold_slot() && s.logits_divisor == 1.0 &&
        s.logits_multiplier == 1.0 && s.final_softcap <= 0 && x.numel() == s.hidden_size)
      return ops::normed_linear_argmax(x, final_norm, head.weight, *greedy_ids, in.advance);
    const Tensor logits = apply_head(head, {}, &final_norm);
    if (greedy_ids) *greedy_ids = ops::argmax_rows(logits, in.advance);
    return logits;
  }
  head.hidden = norm(x, s.names.final_norm);
  const Tensor logits = apply_head(head, {});
  if (greedy_ids) *greedy_ids = ops::argmax_rows(logits, in.advance);
  return logits;
}

Tensor DecoderModel::run(const Tensor& input_ids, const Step& step, const Trace& trace) {
  Tensor x = run_layers(input_ids, step, trace);
  x = norm(x, spec_.names.final_norm);
  if (trace) trace("final_norm", x);
  return x;
}

Tensor DecoderModel::run_layers(const Tensor& input_ids, const Step& step, const Trace& trace) {
  const auto& s = spec_;
  const int64_t H = s.hidden_size;
  auto emit = [&](const std::string& name, const Tensor& t) {
    if (trace) trace(name, t);
  };
  // A decode step's first products may read the token's embedding themselves (DecodeInputs::
  // embedded): x is then the row they store, which nothing reads before them.
  const ops::EmbeddedInput* embedded = step.decode ? step.decode->embedded : nullptr;
  // (layer_folds_norms also refuses an active adapter, which may change the lookup.)
  if (embedded && embedded->table.defined() && embedded->table.same_storage(param(s.names.embed)) &&
      !s.embed_scale_sqrt_hidden && s.embed_multiplier == 1.0 &&
      layer_folds_norms(0, embedded->store, step, trace)) {
    const ops::RowNorm norm1 = row_norm(s.layer_name(0, s.names.norm1));
    bool all = true;
    for (const std::string& proj : {s.names.q, s.names.k, s.names.v})
      all = all && ops::embedding_folds(*embedded, param(s.layer_name(0, proj + ".weight")), norm1);
    if (all) {
      Step first = step;
      first.embedded = embedded;
      Tensor x = layer(0, embedded->store, first, trace);
      for (int64_t l = 1; l < s.num_layers; ++l) x = layer(l, std::move(x), step, trace);
      return x;
    }
  }
  std::optional<int64_t> padding_idx;
  if (s.pad_token_id && *s.pad_token_id >= 0 && *s.pad_token_id < s.vocab_size) padding_idx = s.pad_token_id;
  Tensor x = ops::embedding(param(s.names.embed), input_ids, padding_idx);
  x = nn::adapt_embedding(module_of(s.names.embed), input_ids, x, padding_idx);
  if (s.embed_scale_sqrt_hidden) {
    // transformers multiplies by sqrt(hidden) rounded to the activation dtype (f32 here).
    x = ops::scale(x, static_cast<float>(std::sqrt(static_cast<double>(H))));
  }
  if (s.embed_multiplier != 1.0) x = ops::scale(x, static_cast<float>(s.embed_multiplier));
  x = ops::train_dropout(x, static_cast<float>(s.embedding_dropout));
  emit("embed", x);
  const bool checkpointing = gradient_checkpointing_ && !trace && autograd::active_tape();
  for (int64_t l = 0; l < s.num_layers; ++l) {
    if (checkpointing) {
      // The layer's input is all this forward keeps; the backward pass re-runs the layer.
      x = autograd::checkpoint(
          [this, l, step](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{layer(l, in[0], step, {})};
          },
          {x})[0];
    } else {
      // Moved in: without a tape, the layer's input is freed as soon as the layer is done with it.
      x = layer(l, std::move(x), step, trace);
    }
    emit(fmt::format("layers.{}.out", l), x);
  }
  return x;
}

}  // namespace vkf::models
