// transformers' causal-LM loss: logits[:, t] predicts labels[:, t+1]; labels of -100 are ignored;
// the mean is over counted tokens. Labels come from the host (the data pipeline knows them).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace vkf::train {

// logits [B, T, V]; labels row-major [B*T], not shifted (HF convention). Returns a scalar [].
Tensor causal_lm_loss(const Tensor& logits, const std::vector<int64_t>& labels);

// labels shifted left by one within each row, -100 in the last column (what the loss compares).
std::vector<int32_t> shift_labels(const std::vector<int64_t>& labels, int64_t batch, int64_t seq);

}  // namespace vkf::train
