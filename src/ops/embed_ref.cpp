// CPU reference for the embedding (see embed_ref.h).
#include "ops/embed_ref.h"

#include <cstddef>

namespace vkf::ref {

std::vector<double> embedding(const std::vector<double>& weight, int64_t vocab, int64_t hidden,
                              const std::vector<int64_t>& ids) {
  std::vector<double> out(ids.size() * static_cast<size_t>(hidden), 0.0);
  for (size_t n = 0; n < ids.size(); ++n) {
    if (ids[n] < 0 || ids[n] >= vocab) continue;
    for (int64_t c = 0; c < hidden; ++c)
      out[n * hidden + c] = weight[static_cast<size_t>(ids[n] * hidden + c)];
  }
  return out;
}

std::vector<double> embedding_backward(const std::vector<int64_t>& ids,
                                       const std::vector<double>& dy, int64_t vocab,
                                       int64_t hidden, std::optional<int64_t> padding_idx) {
  std::vector<double> dw(static_cast<size_t>(vocab * hidden), 0.0);
  for (size_t n = 0; n < ids.size(); ++n) {
    if (ids[n] < 0 || ids[n] >= vocab || ids[n] == padding_idx) continue;
    for (int64_t c = 0; c < hidden; ++c)
      dw[static_cast<size_t>(ids[n] * hidden + c)] += dy[n * hidden + c];
  }
  return dw;
}

}  // namespace vkf::ref
