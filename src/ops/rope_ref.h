// CPU references for rotary embeddings in double: the inverse-frequency formulas of each rope type
// written from their definitions (RoPE, linear / dynamic-NTK scaling, YaRN, LongRoPE, Llama 3.1),
// the ideal cos/sin tables, and the rotation applied to [B, T, heads, D] forward and backward.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/rope_tables.h"

namespace vkf::ref {

struct RopeFreqs {
  std::vector<double> inv_freq;
  double attention_scaling = 1.0;
};

// Exact-arithmetic inverse frequencies of cfg (no float32 rounding anywhere); seq_len as in
// ops::rope_inv_freq.
RopeFreqs rope_inv_freq(const ops::RopeConfig& cfg, int64_t seq_len);

// cos/sin of inv_freq[j] * p times scaling, [positions, inv_freq.size()].
void rope_cos_sin(const std::vector<double>& inv_freq, double scaling, int64_t positions,
                  std::vector<double>& cos, std::vector<double>& sin);

// y = rotation of x [B, T, heads, D] by the angles of tables cos/sin [P, rotary_dim / 2] at
// positions[b * T + t]; interleaved pairs (2j, 2j + 1), else (j, j + rotary_dim / 2).
std::vector<double> rope_apply(const std::vector<double>& x, int64_t B, int64_t T, int64_t H,
                               int64_t D, const std::vector<double>& cos,
                               const std::vector<double>& sin,
                               const std::vector<int64_t>& positions, int64_t rotary_dim,
                               bool interleaved);
// dx = R^T dy for the same rotation.
std::vector<double> rope_apply_backward(const std::vector<double>& dy, int64_t B, int64_t T,
                                        int64_t H, int64_t D, const std::vector<double>& cos,
                                        const std::vector<double>& sin,
                                        const std::vector<int64_t>& positions, int64_t rotary_dim,
                                        bool interleaved);

}  // namespace vkf::ref
