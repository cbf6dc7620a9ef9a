// CPU reference dropout (see dropout_ref.h).
#include "ops/dropout_ref.h"

#include <cstddef>

namespace vkf::ref {

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint64_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kW0;
      k[1] += kW1;
    }
    const uint64_t p0 = kM0 * c[0], p1 = kM1 * c[2];
    const auto hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const auto hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
  return c;
}

uint32_t dropout_word(uint64_t seed, uint64_t counter) {
  return philox4x32_10({static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0, 0},
                       {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)})[0];
}

bool dropout_keep(uint64_t seed, uint64_t counter, double p) {
  const double u = static_cast<double>(dropout_word(seed, counter) >> 8) / 16777216.0;
  return u >= p;
}

std::vector<double> dropout(const std::vector<double>& x, double p, uint64_t seed,
                            uint64_t offset) {
  std::vector<double> y(x.size(), 0.0);
  if (p >= 1.0) return y;
  for (size_t i = 0; i < x.size(); ++i)
    if (dropout_keep(seed, offset + i, p)) y[i] = x[i] / (1.0 - p);
  return y;
}

std::vector<double> dropout_backward(const std::vector<double>& dy, double p, uint64_t seed,
                                     uint64_t offset) {
  return dropout(dy, p, seed, offset);  // linear in x with a fixed mask
}

}  // namespace vkf::ref
