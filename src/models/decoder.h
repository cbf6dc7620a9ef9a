// The generic decoder: one implementation of the Llama-family topology driven by ArchSpec flags,
// with parameters held under their Hugging Face names. forward() records on the autodiff tape when
// one is active, so training is forward + Tape::backward + an optimizer step.
// Every intermediate has a name (layers.3.attn.q, ...) and can be captured through a Trace to
// compare with Hugging Face forward hooks tensor by tensor. Dropout (ArchSpec's probabilities)
// applies only while a training dropout stream is active (core/dropout_rng.h). With gradient
// checkpointing on, a recorded forward keeps only each layer's input and recomputes the layer in
// the backward pass (core/activation_checkpoint.h); gradients are bitwise the same.
// For inference the weight matrices (embedding, projections, head) may be held in f16: half the
// bytes to read per decoded token; activations and accumulations stay f32.
#pragma once

#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/arch_spec.h"
#include "nn/linear.h"
#include "ops/decode.h"

namespace vkf::models {

// Receives each named intermediate of a forward pass.
using Trace = std::function<void(const std::string& name, const Tensor& value)>;

// Keys and values of past positions for incremental decoding: per layer [B, capacity, Hkv, D].
// forward() with a cache appends the new positions' keys/values and attends over all of them.
struct KVCache {
  std::vector<Tensor> k, v;
  int64_t batch = 0, capacity = 0, length = 0;
};

// The per-step inputs of DecoderModel::decode_step(), all read on the device, so that one
// recording of the step serves every position (infer/decode_step.h captures and replays it).
struct DecodeInputs {
  Tensor ids;        // I32 [B, 1]: each row's new token
  Tensor positions;  // I32 [B, 1]: its rotary position
  Tensor cached;     // I32, element 0: positions already in the cache (the new key's slot)
  Tensor mask;       // I32 [B, capacity]: key padding mask over every cache slot, or undefined
  // With decode_step's greedy ids: the greedy choice also advances these inputs on the device for
  // the next step (ops::ArgmaxAdvance; ids, positions and cached are then views of its state).
  const ops::ArgmaxAdvance* advance = nullptr;
  // From decode_embedded_input(ids) (batch 1): the step's first products read the token's
  // embedding row themselves and one of them stores it, with no embedding dispatch before them,
  // where they can (else the step embeds the token as forward() does).
  const ops::EmbeddedInput* embedded = nullptr;
};

class DecoderModel {
 public:
  // Loads config.json and the safetensors weights (single or sharded, f32/f16/bf16/f64) from a
  // Hugging Face model folder; weights become f32 master copies, except that the weight matrices
  // become `matrix_dtype` (F16: an inference model, rounded to nearest even).
  static DecoderModel load(const std::string& dir, DType matrix_dtype = DType::F32);
  // F16 when the checkpoint in `dir` stores its weight matrices in 16 bits (f16 or bf16; judged by
  // the embedding matrix), else F32: the matrix dtype that keeps the file's precision at the
  // smallest size (what `vkformer generate --dtype auto` loads).
  static DType checkpoint_matrix_dtype(const std::string& dir);
  // Every parameter f32, or the rank-2 ones (matrices) all f16 and the others f32.
  DecoderModel(ArchSpec spec, std::map<std::string, Tensor> params);
  // The parameters a model of this spec has: HF name and shape, in named_parameters() order.
  static std::vector<std::pair<std::string, Shape>> parameter_shapes(const ArchSpec& spec);

  const ArchSpec& spec() const { return spec_; }
  // F32, or F16 when the weight matrices are held in half precision (inference only: they cannot
  // carry gradients).
  DType matrix_dtype() const { return matrix_dtype_; }
  // Converts the weight matrices to `dtype` (F32 or F16) on the device, rounding to nearest even.
  void convert_matrices(DType dtype);
  // Trainable parameters by HF name, in the order of transformers' named_parameters(); a tied
  // output matrix is not listed separately (it is the embedding).
  const std::vector<std::string>& parameter_names() const { return order_; }
  const Tensor& param(const std::string& name) const;
  std::vector<Tensor> parameters() const;
  void set_requires_grad(bool on);
  // Activation recomputation per decoder layer in recorded forwards (not with a Trace, whose
  // callbacks would see the recomputation too).
  void set_gradient_checkpointing(bool on) { gradient_checkpointing_ = on; }
  bool gradient_checkpointing() const { return gradient_checkpointing_; }

  // PEFT adapters (src/peft), attached by name. The active one changes forward() (LoRA, and its
  // modules_to_save copies replace base weights) unless adapters are disabled, as peft's
  // set_adapter / disable_adapter do. Adding the first adapter makes it active.
  void add_adapter(const std::string& name, std::shared_ptr<nn::ModuleAdapter> adapter);
  void set_active_adapter(const std::string& name);
  void set_adapters_enabled(bool on);
  bool adapters_enabled() const { return adapters_enabled_; }
  const std::string& active_adapter_name() const { return active_; }  // "" when none
  // The adapter forward() applies now (null when none is active or adapters are disabled).
  const nn::ModuleAdapter* effective_adapter() const;

  // input_ids [B, T] (I32 or I64); attention_mask [B, T] (1 = token, 0 = padding) or undefined;
  // with a cache the mask covers every key, [B, cache->length + T]. Returns logits [B, T, vocab].
  // Positions are cache->length + 0..T-1 in every row, as transformers does, unless `positions`
  // gives them per token ([B*T] row-major; generation with left padding). With `last_only`, the
  // head runs on the last position only and logits are [B, 1, vocab] (a prefill needs nothing
  // else: T times less head work and logits memory). cache->length grows by T.
  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask, const Trace& trace = {},
                 KVCache* cache = nullptr, std::span<const int32_t> positions = {},
                 bool last_only = false);
  KVCache make_cache(int64_t batch, int64_t capacity) const;

  // What forward() turns into logits, for a loss fused with the LM head
  // (ops::linear_cross_entropy) that never holds [B, T, vocab] logits:
  // logits = softcap(logit_scale · hidden · weightᵀ).
  struct HeadInput {
    Tensor hidden;  // [B, T, hidden_size]: the final norm's output
    Tensor weight;  // [vocab, hidden_size]: lm_head, the tied embedding or an adapter's copy
    float logit_scale = 1.0f;  // 1 / logits_divisor · logits_multiplier as one f32 factor
    float softcap = 0.0f;      // final logit soft-cap (gemma2); 0: none
  };
  // forward() up to the final norm (no trace, no KV cache), and the head that would follow. Not
  // while lora_on_head(): that head's low-rank term exists only inside forward().
  HeadInput forward_hidden(const Tensor& input_ids, const Tensor& attention_mask);
  // Whether the adapter forward() applies puts LoRA on the LM head.
  bool lora_on_head() const;
  // The module name nn::linear sees for the head (LoRA targets it as "lm_head").
  static constexpr const char* kHeadModule = "lm_head";
  // Whether q/k/v and gate/up may run as one product each (groups_projections; on by default,
  // VKF_GROUP_PROJECTIONS=off turns it off): for A/B timing. Memory plans follow the setting.
  static void set_projection_grouping(bool on);
  static bool projection_grouping();
  // Whether a layer's q, k and v projections (gate and up) run as one product
  // (ops::linear_split / linear_concat): where products read f16 operand copies on tensor cores
  // and the widest of the projections has at most kGroupedProjectionRows outputs, not with a
  // folded input norm (the decode step's own kernels), nor with an adapter (it hooks each
  // projection by name), nor for f16 inference weights.
  static bool groups_projections(const ops::RowNorm* pre_norm,
                                 std::initializer_list<Tensor> weights);
  // The part of that rule that depends on the shapes and settings only (train/memory_plan.cpp
  // plans with it): measured on the H200 (bench/RESULTS.md, fifteenth session), one product of
  // 960 or 3072 outputs instead of 576 + 192 + 192 or 1536 + 1536 made a 135M mixed-precision step
  // 3% faster, while fp32 steps (whose products stream-K already balances) and the 1B shape's
  // 8192-wide gate/up gained nothing and kept more memory.
  static bool groups_projections_of(int64_t widest_output);
  static constexpr int64_t kGroupedProjectionRows = 2048;

  // One decoding step (one new token per row) over `cache`, whose capacity is fixed: writes the
  // new keys and values at slot in.cached[0] and returns logits [B, 1, vocab]. Every value that
  // changes from step to step is device data (DecodeInputs), and nothing is uploaded or read back,
  // so the commands it records can be captured once and replayed; cache.length is left to the
  // caller. Same results as forward() with that cache up to summation order: it runs fused
  // kernels (rotary + cache append, one-query attention, residual adds in the projections'
  // epilogues, gate/up/activation in one pass for f16 weights) where no adapter or trace needs
  // the separate steps.
  // With `greedy_ids`, it also sets *greedy_ids to each row's argmax (I32 [B], as
  // ops::argmax_rows of the logits gives it), chosen by the head's own product where the final norm
  // folds into it and nothing follows the head (ops::normed_linear_argmax), else by argmax_rows.
  // With in.advance the choice also advances `in` on the device (*greedy_ids: its state's ids).
  Tensor decode_step(const DecodeInputs& in, KVCache& cache, Tensor* greedy_ids = nullptr);
  // Whether decode_step() folds the final RMSNorm into the head's product where it can, and the
  // greedy choice too (both on by default): for A/B timing.
  static void set_decode_head_norm_fold(bool on);
  static void set_decode_head_argmax_fold(bool on);
  // "" when decode_step() serves this model; else why not (rotary frequencies that depend on the
  // sequence length change at every step).
  std::string decode_step_unsupported() const;
  // Builds what decode_step() over `cache` reads but never changes (the rotary tables covering
  // its capacity), which a capture of the step could not upload; the step builds it itself too.
  void prepare_decode(const KVCache& cache);
  // DecodeInputs::embedded for the token id in `ids` (I32, one row): the embedding table where it
  // is f16 and the model applies nothing to its rows (no scale, no multiplier), with a store for
  // the row; else an undefined table. Keep it as long as the inputs that point to it.
  ops::EmbeddedInput decode_embedded_input(const Tensor& ids) const;

  // Writes config.json and model.safetensors (sharded above max_shard_bytes) that transformers
  // loads; tied weights are stored once. Files are written atomically.
  void save(const std::string& dir, uint64_t max_shard_bytes = 5'000'000'000ull) const;

 private:
  // Embedding, layers and the final norm: [B, T, hidden_size]. The caller activates the adapter.
  // With a cache, this call's keys and values are appended after cache->length, which the caller
  // (forward()) then advances.
  Tensor hidden_states(const Tensor& input_ids, const Tensor& attention_mask, const Trace& trace,
                       KVCache* cache, std::span<const int32_t> positions);
  HeadInput head_input(Tensor hidden) const;
  // Logits from the head's input, as forward() and decode_step() both return them. With
  // `pre_norm` (decode_step(), no adapter), head.hidden is the final norm's input, which the
  // head's product normalizes as it reads it (ops::normed_linear).
  Tensor apply_head(const HeadInput& head, const Trace& trace,
                    const ops::RowNorm* pre_norm = nullptr) const;
  Tensor norm(const Tensor& x, const std::string& prefix) const;
  struct Step;  // what every layer of one forward call shares (mask, positions, cache)
  // The embedding, layers and final norm of one step: the hidden states [B, T, hidden_size].
  Tensor run(const Tensor& input_ids, const Step& step, const Trace& trace);
  Tensor run_layers(const Tensor& input_ids, const Step& step, const Trace& trace);  // no norm
  Tensor layer(int64_t layer, Tensor x, const Step& step, const Trace& trace);  // x moved in
  // Whether layer() folds each RMSNorm into the products that read it (a decode step's form).
  bool layer_folds_norms(int64_t layer, const Tensor& x, const Step& step,
                         const Trace& trace) const;
  // With `residual`, the block's output projection is added into *residual in place and an
  // undefined tensor is returned. With `pre_norm`, h is the block's input before its RMSNorm,
  // which the input projections apply as they read it (ops::normed_linear; a decode step).
  Tensor attention_block(int64_t layer, const Tensor& h, const Step& step, const Trace& trace,
                         const Tensor* residual = nullptr, const ops::RowNorm* pre_norm = nullptr);
  Tensor mlp_block(int64_t layer, const Tensor& h, const Trace& trace,
                   const Tensor* residual = nullptr, const ops::RowNorm* pre_norm = nullptr) const;
  ops::RowNorm row_norm(const std::string& prefix) const;  // the RMSNorm at `prefix`
  const Tensor& rope_table(int64_t layer, int64_t positions, bool cos);

  ArchSpec spec_;
  std::map<std::string, Tensor> params_;
  std::vector<std::string> order_;
  struct RopeTable {
    int64_t positions = 0;
    Tensor cos, sin;  // [positions, rotary_dim / 2]
  };
  std::map<std::string, RopeTable> rope_cache_;  // key: the rotary parameters
  std::map<int64_t, Tensor> arange_positions_;   // I32 [1, T] of 0..T-1, key T
  std::map<std::string, std::shared_ptr<nn::ModuleAdapter>> adapters_;
  std::string active_;
  DType matrix_dtype_ = DType::F32;
  bool adapters_enabled_ = true;
  bool gradient_checkpointing_ = false;
};

}  // namespace vkf::models
