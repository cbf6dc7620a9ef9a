// The generic decoder: one implementation of the Llama-family topology driven by ArchSpec flags,
// with parameters held under their Hugging Face names. forward() records on the autodiff tape when
// one is active, so training is forward + Tape::backward + an optimizer step.
// Every intermediate has a name (layers.3.attn.q, ...) and can be captured through a Trace to
// compare with Hugging Face forward hooks tensor by tensor.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/arch_spec.h"

namespace vkf::models {

// Receives each named intermediate of a forward pass.
using Trace = std::function<void(const std::string& name, const Tensor& value)>;

class DecoderModel {
 public:
  // Loads config.json and the safetensors weights (single or sharded, f32/f16/bf16/f64) from a
  // Hugging Face model folder; weights become f32 master copies.
  static DecoderModel load(const std::string& dir);
  DecoderModel(ArchSpec spec, std::map<std::string, Tensor> params);
  // The parameters a model of this spec has: HF name and shape, in named_parameters() order.
  static std::vector<std::pair<std::string, Shape>> parameter_shapes(const ArchSpec& spec);

  const ArchSpec& spec() const { return spec_; }
  // Trainable parameters by HF name, in the order of transformers' named_parameters(); a tied
  // output matrix is not listed separately (it is the embedding).
  const std::vector<std::string>& parameter_names() const { return order_; }
  const Tensor& param(const std::string& name) const;
  std::vector<Tensor> parameters() const;
  void set_requires_grad(bool on);

  // input_ids [B, T] (I32 or I64); attention_mask [B, T] (1 = token, 0 = padding) or undefined.
  // Returns logits [B, T, vocab]. Positions are 0..T-1 in every row, as transformers does.
  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask, const Trace& trace = {});

  // Writes config.json and model.safetensors (sharded above max_shard_bytes) that transformers
  // loads; tied weights are stored once. Files are written atomically.
  void save(const std::string& dir, uint64_t max_shard_bytes = 5'000'000'000ull) const;

 private:
  Tensor norm(const Tensor& x, const std::string& prefix) const;
  Tensor attention_block(int64_t layer, const Tensor& h, const Tensor& mask, int64_t T,
                         const Trace& trace);
  Tensor mlp_block(int64_t layer, const Tensor& h, const Trace& trace) const;
  const Tensor& rope_table(int64_t layer, int64_t positions, bool cos);

  ArchSpec spec_;
  std::map<std::string, Tensor> params_;
  std::vector<std::string> order_;
  std::map<std::string, Tensor> rope_cache_;  // key: rope parameters + positions
};

}  // namespace vkf::models
