// Cross-entropy loss over rows of logits, fused with log-softmax (torch.nn.functional.cross_entropy
// with reduction "mean" / "sum" and ignore_index; transformers' causal-LM loss is this on shifted
// logits/labels). The forward keeps only per-row logsumexp [N] and the counted-row total; the
// backward writes dlogits = (softmax - onehot) * scale directly, the one [N, V] tensor it needs.
// All reductions have a fixed order: the same inputs give the same bits.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace vkf::ops {

// Mean over rows whose label is not ignore_index of (logsumexp(logits[n]) - logits[n, label[n]]).
// logits [N, V] f32 (V >= 1), labels [N] i32 or i64; returns a scalar [] f32, differentiable in
// logits. As in torch, the mean of zero counted rows (every label ignored, or N = 0) is NaN, and
// its gradient is zero.
// A label outside [0, V) other than ignore_index cannot raise an error on the GPU (the host would
// have to wait): that row's loss and gradient row are NaN, so the loss shows it. Data loaders
// should call check_labels() on the host, where the labels are known anyway.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, int64_t ignore_index = -100);

// For gradient accumulation over micro-batches, where the mean must run over the counted tokens of
// all micro-batches: loss_sum = the sum (not the mean) of the counted rows' losses, [] f32 and
// differentiable (its gradient is (softmax - onehot) * dloss_sum per counted row, 0 for ignored
// rows); count = the number of counted rows, [] f32 (exact up to 2^24 rows), not differentiable.
// A train loop sums loss_sum and count over micro-batches and divides once, or seeds each
// backward with 1 / total_count when the total is known from the host-side labels.
struct CrossEntropyParts {
  Tensor loss_sum;
  Tensor count;
};
CrossEntropyParts cross_entropy_parts(const Tensor& logits, const Tensor& labels,
                                      int64_t ignore_index = -100);

// Throws vkf::Error naming `where`, the first label that is neither ignore_index nor in
// [0, vocab), and its position.
void check_labels(const std::vector<int64_t>& labels, int64_t vocab, int64_t ignore_index,
                  const char* where);

}  // namespace vkf::ops
