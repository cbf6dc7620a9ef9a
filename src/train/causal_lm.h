// transformers' causal-LM loss: logits[:, t] predicts labels[:, t+1]; labels of -100 are ignored;
// the mean is over counted tokens. Labels come from the host (the data pipeline knows them).
// Training and evaluation take the loss straight from the model with the LM head fused into it
// (ops::linear_cross_entropy), so no [tokens, vocab] logits exist; code that needs the logits
// themselves (generation, parity, dumps) calls forward() and the logits form.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "models/decoder.h"
#include "ops/loss.h"

namespace vkf::train {

// logits [B, T, V]; labels row-major [B*T], not shifted (HF convention). Returns a scalar [].
Tensor causal_lm_loss(const Tensor& logits, const std::vector<int64_t>& labels);

// labels shifted left by one within each row, -100 in the last column (what the loss compares).
std::vector<int32_t> shift_labels(const std::vector<int64_t>& labels, int64_t batch, int64_t seq);

// How the loss meets the LM head.
enum class HeadLoss {
  Fused,    // ops::linear_cross_entropy on the final hidden states, in chunks of tokens
  Unfused,  // forward()'s [B, T, V] logits, then ops::cross_entropy_parts (the composed form)
};

// The summed loss and counted tokens of a batch (ids and mask [B, T]; shifted_labels [B*T] i32
// or i64, shift_labels' output), differentiable in the model's tensors. Fused unless `how` says
// Unfused or the active adapter puts LoRA on the head (which only forward() applies).
ops::CrossEntropyParts causal_lm_loss_parts(models::DecoderModel& model, const Tensor& ids,
                                            const Tensor& mask, const Tensor& shifted_labels,
                                            HeadLoss how = HeadLoss::Fused);

}  // namespace vkf::train
