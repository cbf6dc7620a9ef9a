// nn::linear: the single place every projection of every model goes through (y = x·Wᵀ + b with
// Hugging Face's [out, in] weight layout), and the hook through which a PEFT adapter (src/peft)
// changes a forward pass: LoRA on linear layers and embeddings, and modules_to_save replacements.
// Model code calls nn::linear / nn::adapt_embedding / nn::replacement with the HF module names;
// the model activates its adapter for the duration of a forward call with an AdapterScope.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/tensor.h"

namespace vkf::nn {

// What an adapter changes in a forward pass. Module names are HF's (e.g.
// "model.layers.0.self_attn.q_proj", "model.embed_tokens", "lm_head").
class ModuleAdapter {
 public:
  virtual ~ModuleAdapter() = default;
  // y = base linear output of `module` on input x; returns y adapted (or y unchanged).
  virtual Tensor adapt_linear(const std::string& module, const Tensor& x, const Tensor& y) const = 0;
  // y = base embedding output for token ids; returns y adapted (or unchanged).
  virtual Tensor adapt_embedding(const std::string& module, const Tensor& ids, const Tensor& y,
                                 std::optional<int64_t> padding_idx) const = 0;
  // Whether adapt_linear may change the output of `module`: code that fuses a projection into
  // something else (the LM head into its loss) must go through nn::linear when it does. An
  // adapter that cannot tell answers true.
  virtual bool adapts_linear(const std::string& /*module*/) const { return true; }
  // The adapter's own copy of a parameter (modules_to_save), or null to use the base weight.
  virtual const Tensor* replacement(const std::string& param_name) const = 0;
};

// Makes `adapter` (may be null: none) the active one on this thread for its lifetime.
class AdapterScope {
 public:
  explicit AdapterScope(const ModuleAdapter* adapter);
  ~AdapterScope();
  AdapterScope(const AdapterScope&) = delete;
  AdapterScope& operator=(const AdapterScope&) = delete;

 private:
  const ModuleAdapter* previous_;
};

const ModuleAdapter* active_adapter();

// `name` is the HF module name, for adapters and traces.
Tensor linear(const std::string& name, const Tensor& x, const Tensor& weight, const Tensor& bias = {});

// The active adapter's change to an embedding output (identity without one).
Tensor adapt_embedding(const std::string& module, const Tensor& ids, const Tensor& y,
                       std::optional<int64_t> padding_idx);

}  // namespace vkf::nn
