// CPU reference for the LM head fused with cross-entropy, in double, from the definition: logits
// z = h·Wᵀ, y = z·scale, then (cap > 0) y = cap·tanh(y / cap); per row not labelled ignore_index,
// loss = logsumexp(y) - y[label] (NaN for a label outside [0, V)); loss_sum and count over those
// rows. The backward, for an incoming gradient dloss of loss_sum: dy = (softmax(y) - onehot) ·
// dloss, dz = dy · (1 - tanh²(z·scale / cap)) · scale, dh = dz·W, dW = dzᵀ·h. h is [N, H], W is
// [V, H], row-major.
#pragma once

#include <cstdint>
#include <vector>

namespace vkf::ref {

struct LinearCrossEntropy {
  double loss_sum = 0;
  int64_t count = 0;
  std::vector<double> dh;  // [N, H]
  std::vector<double> dw;  // [V, H]
};

LinearCrossEntropy linear_cross_entropy(const std::vector<double>& h, const std::vector<double>& w,
                                        int64_t rows, int64_t hidden, int64_t vocab,
                                        const std::vector<int64_t>& labels, double scale,
                                        double softcap, int64_t ignore_index, double dloss);

}  // namespace vkf::ref
