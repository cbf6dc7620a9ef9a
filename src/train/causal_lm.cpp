// Causal-LM loss (see causal_lm.h).
#include "train/causal_lm.h"

#include "ops/linear_cross_entropy.h"
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

ops::CrossEntropyParts causal_lm_loss_parts(models::DecoderModel& model, const Tensor& ids,
                                            const Tensor& mask, const Tensor& shifted_labels,
                                            HeadLoss how) {
  VKF_REQUIRE(ids.defined() && ids.rank() == 2 && shifted_labels.defined() &&
                  shifted_labels.rank() == 1 && shifted_labels.dim(0) == ids.numel(),
              "causal_lm_loss_parts: labels {} for input ids {}; expected [batch * seq] labels",
              shifted_labels.defined() ? shape_str(shifted_labels.shape()) : "(undefined)",
              ids.defined() ? shape_str(ids.shape()) : "(undefined)");
  const int64_t tokens = ids.numel(), vocab = model.spec().vocab_size;
  // LoRA on the head lives in nn::linear, inside forward(): then the logits are made whole.
  if (how == HeadLoss::Fused && !model.lora_on_head()) {
    const models::DecoderModel::HeadInput head = model.forward_hidden(ids, mask);
    ops::LinearCrossEntropyOptions o;
    o.logit_scale = head.logit_scale;
    o.softcap = head.softcap;
    return ops::linear_cross_entropy(head.hidden.reshape({tokens, head.hidden.dim(-1)}),
                                     head.weight, shifted_labels, o);
  }
  const Tensor logits = model.forward(ids, mask);
  return ops::cross_entropy_parts(logits.reshape({tokens, vocab}), shifted_labels);
}

}  // namespace vkf::train
