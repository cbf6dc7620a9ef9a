// CPU reference for cross-entropy in double, from the definition (torch.nn.functional.
// cross_entropy): per counted row, loss = logsumexp(x) - x[label]; rows labelled ignore_index are
// not counted; the mean over zero rows is NaN. A label outside [0, V) (and not ignore_index)
// makes its row NaN, as vkformer's kernels document. logits are [N, V] row-major.
#pragma once

#include <cstdint>
#include <vector>

namespace vkf::ref {

struct CrossEntropy {
  double loss_sum = 0;
  int64_t count = 0;
  double mean = 0;
  std::vector<double> lse;  // [N]
};

CrossEntropy cross_entropy(const std::vector<double>& logits, int64_t rows, int64_t vocab,
                           const std::vector<int64_t>& labels, int64_t ignore_index);

// d(loss)/d(logits) * dloss for the mean (mean = true) or the sum form.
std::vector<double> cross_entropy_backward(const std::vector<double>& logits, int64_t rows,
                                           int64_t vocab, const std::vector<int64_t>& labels,
                                           int64_t ignore_index, double dloss, bool mean);

}  // namespace vkf::ref
