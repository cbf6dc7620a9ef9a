// CPU reference for cross-entropy (see loss_ref.h).
#include "ops/loss_ref.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

namespace vkf::ref {
namespace {

double logsumexp(const double* x, int64_t n) {
  const double m = *std::max_element(x, x + n);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - m);
  return m + std::log(s);
}

bool valid(int64_t label, int64_t vocab) { return label >= 0 && label < vocab; }

}  // namespace

CrossEntropy cross_entropy(const std::vector<double>& logits, int64_t rows, int64_t vocab,
                           const std::vector<int64_t>& labels, int64_t ignore_index) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CrossEntropy r;
  r.lse.resize(static_cast<size_t>(rows));
  for (int64_t n = 0; n < rows; ++n) {
    const double* x = logits.data() + n * vocab;
    r.lse[n] = logsumexp(x, vocab);
    if (labels[n] == ignore_index) continue;
    r.count += 1;
    r.loss_sum += valid(labels[n], vocab) ? r.lse[n] - x[labels[n]] : nan;
  }
  r.mean = r.count == 0 ? nan : r.loss_sum / static_cast<double>(r.count);
  return r;
}

std::vector<double> cross_entropy_backward(const std::vector<double>& logits, int64_t rows,
                                           int64_t vocab, const std::vector<int64_t>& labels,
                                           int64_t ignore_index, double dloss, bool mean) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  int64_t count = 0;
  for (int64_t n = 0; n < rows; ++n) count += labels[n] != ignore_index ? 1 : 0;
  const double scale = mean ? dloss / static_cast<double>(count) : dloss;
  std::vector<double> g(logits.size(), 0.0);
  for (int64_t n = 0; n < rows; ++n) {
    if (labels[n] == ignore_index) continue;
    const double* x = logits.data() + n * vocab;
    const double lse = logsumexp(x, vocab);
    for (int64_t v = 0; v < vocab; ++v) {
      double d = std::exp(x[v] - lse) - (v == labels[n] ? 1.0 : 0.0);
      g[n * vocab + v] = valid(labels[n], vocab) ? d * scale : nan;
    }
  }
  return g;
}

}  // namespace vkf::ref
