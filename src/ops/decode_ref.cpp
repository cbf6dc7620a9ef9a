// CPU references of the decode ops (see decode_ref.h).
#include "ops/decode_ref.h"

#include <cmath>

namespace vkf::ref {

std::vector<int32_t> argmax_rows(const std::vector<double>& x, int64_t rows, int64_t cols) {
  std::vector<int32_t> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t best = 0;
    for (int64_t c = 1; c < cols; ++c) {
      const double v = x[static_cast<size_t>(r * cols + c)],
                   b = x[static_cast<size_t>(r * cols + best)];
      if (std::isnan(b)) break;  // the first NaN wins
      if (std::isnan(v) || v > b) best = c;
    }
    out[static_cast<size_t>(r)] = static_cast<int32_t>(best);
  }
  return out;
}

void kv_cache_write(std::vector<double>& cache, const std::vector<double>& values, int64_t batch,
                    int64_t capacity, int64_t row, int64_t slot) {
  if (slot < 0 || slot >= capacity) return;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < row; ++c)
      cache[static_cast<size_t>((b * capacity + slot) * row + c)] =
          values[static_cast<size_t>(b * row + c)];
}

}  // namespace vkf::ref
