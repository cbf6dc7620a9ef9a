// CPU reference (double) for ops::dropout: Philox4x32-10 written from its published definition,
// the keep rule u >= p with u the top 24 bits of the word over 2^24, and inverted scaling by
// 1 / (1 - p). The tests compare GPU masks with these bit for bit.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace vkf::ref {

// One Philox4x32 block with 10 rounds: counter (4 words) under key (2 words).
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// The random word of 64-bit counter `counter` under 64-bit `seed`: word 0 of the block with
// counter (low, high, 0, 0) and key (low, high) of the seed.
uint32_t dropout_word(uint64_t seed, uint64_t counter);

// Whether the element with this counter is kept at drop probability p.
bool dropout_keep(uint64_t seed, uint64_t counter, double p);

// y[i] = keep(seed, offset + i) ? x[i] / (1 - p) : 0 (0 everywhere when p = 1).
std::vector<double> dropout(const std::vector<double>& x, double p, uint64_t seed, uint64_t offset);
// dx of sum(dy * dropout(x)): the same mask and scale applied to dy.
std::vector<double> dropout_backward(const std::vector<double>& dy, double p, uint64_t seed,
                                     uint64_t offset);

}  // namespace vkf::ref
