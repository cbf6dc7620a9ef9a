// Causal-LM loss (see causal_lm.h).
#include "train/causal_lm.h"

#include "ops/loss.h"
#include "vk/error.h"

namespace vkf::train {

std::vector<int32_t> shift_labels(const std::vector<int64_t>& labels, int64_t batch, int64_t seq) {
  std::vector<int32_t> out(static_cast<size_t>(batch * seq), -100);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t + 1 < seq; ++t)
      out[static_cast<size_t>(b * seq + t)] = static_cast<int32_t>(labels[static_cast<size_t>(b * seq + t + 1)]);
  return out;
}

Tensor causal_lm_loss(const Tensor& logits, const std::vector<int64_t>& labels) {
  VKF_REQUIRE(logits.defined() && logits.rank() == 3, "causal_lm_loss: logits must be [batch, seq, vocab]");
  const int64_t B = logits.dim(0), T = logits.dim(1), V = logits.dim(2);
  VKF_REQUIRE(static_cast<int64_t>(labels.size()) == B * T,
              "causal_lm_loss: {} labels for logits {}", labels.size(), shape_str(logits.shape()));
  const auto shifted = shift_labels(labels, B, T);
  ops::check_labels(std::vector<int64_t>(shifted.begin(), shifted.end()), V, -100,
                    "causal_lm_loss labels");
  const Tensor label_tensor = Tensor::from_host_i32(shifted, {B * T});
  return ops::cross_entropy(logits.reshape({B * T, V}), label_tensor, -100);
}

}  // namespace vkf::train
