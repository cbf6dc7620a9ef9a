// The parity run of PARITY.md: forward, causal-LM loss, backward and AdamW steps on one batch, with
// every result named as the fixtures name them (logits, loss, grad.<p>, step<k>.<p>, loss.step<k>);
// and the comparison of such results with transformers' fp32 and fp64 results.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/decoder.h"
#include "ops/optim.h"
#include "peft/lora.h"

namespace vkf::train {

struct ParityBatch {
  Tensor input_ids;                 // I64 [B, T]
  Tensor attention_mask;            // I64 [B, T]
  std::vector<int64_t> labels;      // [B*T], HF convention
  std::vector<int64_t> mask_host;   // [B*T]
  int64_t batch = 0, seq = 0;
};
ParityBatch load_parity_batch(const std::string& path);

struct ParityOptions {
  int steps = 2;
  ops::AdamWConfig adamw{1e-3, 0.9, 0.999, 1e-8, 0.0};
};

// Runs the parity procedure; results as f32 host tensors in the fixture naming. With an adapter
// (active on the model), only its tensors train, under their peft names; the base stays frozen.
std::vector<io::WriteTensor> run_parity(models::DecoderModel& model, const ParityBatch& batch,
                                        const ParityOptions& options,
                                        const peft::LoraAdapter* adapter = nullptr);

struct ParityRow {
  std::string group;   // "logits", "loss", "grads", "step1", "step2", ...
  std::string name;
  double err64 = 0;    // max |ours - fp64|
  double err32 = 0;    // max |ours - transformers fp32|
  double ref32 = 0;    // max |transformers fp32 - fp64|
  double tolerance = 0;
  bool pass = false;
};

// Compares `ours` (the parity output file) with expected_<set>_fp32/fp64 (PARITY.md tolerance;
// logits only at non-padding positions). Fails if a name is missing on either side.
std::vector<ParityRow> compare_parity(const io::SafetensorsFile& ours, const io::SafetensorsFile& x32,
                                      const io::SafetensorsFile& x64, const std::vector<int64_t>& mask);

}  // namespace vkf::train
