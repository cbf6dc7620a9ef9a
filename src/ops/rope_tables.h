// Rotary-embedding tables: the inverse frequencies and cos/sin tables of transformers' rope types
// (default, linear, dynamic, yarn, longrope, llama3; transformers/modeling_rope_utils.py).
//
// transformers computes inv_freq with float32 tensors; rope_inv_freq() follows the same steps in
// double and rounds to float wherever transformers holds a float32 value, so the numbers are
// transformers' own (to the last bit or one ulp of its float pow), not merely close to the ideal
// formula. Its fp32 forward then rounds freqs = inv_freq * position to float32 before cos and sin;
// rope_cos_sin() keeps that product exact (as transformers' fp64 run does) and rounds each table
// entry once, so the tables are closer to the true rotation than transformers' fp32 ones.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace vkf::ops {

// The fields of transformers' rope_parameters (v5) / rope_scaling (v4), plus the head size.
// Zero means "absent" for the optional integer fields, as noted.
struct RopeConfig {
  std::string type = "default";        // default | linear | dynamic | yarn | longrope | llama3
  double theta = 10000;                // rope_theta
  int64_t head_dim = 0;                // config.head_dim, or hidden_size / num_attention_heads
  double partial_rotary_factor = 1.0;  // rotary_dim = int(head_dim * partial_rotary_factor)
  // linear / dynamic / yarn / llama3 / longrope. For yarn and longrope, 0 means "absent": then
  // factor = max_position_embeddings / original_max_position_embeddings, as transformers does.
  double factor = 1.0;
  // yarn / longrope / llama3; 0 = absent, then max_position_embeddings (transformers' default).
  int64_t original_max_position_embeddings = 0;
  int64_t max_position_embeddings = 0;  // config.max_position_embeddings (dynamic, yarn, longrope)
  double low_freq_factor = 1, high_freq_factor = 4;  // llama3
  // yarn: beta_fast / beta_slow (0 = absent: 32 / 1), mscale and mscale_all_dim (used only when
  // both are set and non-zero), attention_factor (overrides the computed scaling; also longrope),
  // truncate (round the correction range to whole dimensions).
  double beta_fast = 32, beta_slow = 1;
  std::optional<double> mscale, mscale_all_dim, attention_factor;
  bool truncate = true;
  std::vector<double> short_factor, long_factor;  // longrope, rotary_dim / 2 values each
};

struct RopeTables {
  std::vector<double> inv_freq;    // rotary_dim / 2 values, each exactly a float32 value
  double attention_scaling = 1.0;  // transformers multiplies cos and sin by this
  int64_t rotary_dim = 0;
};

// rotary_dim = int(head_dim * partial_rotary_factor); must be even and > 0.
int64_t rope_rotary_dim(const RopeConfig& cfg);

// Inverse frequencies and attention scaling of cfg. `seq_len` (0 = not given) matters only for
//   dynamic:  the sequence length the frequencies are stretched for, max(seq_len,
//             max_position_embeddings). transformers recomputes at forward time with the largest
//             max(position_ids) + 1 seen since the last reset (the caller tracks that state), and
//             then computes the stretched base with float32 tensors; so does this function.
//   longrope: long_factor when seq_len > original_max_position_embeddings, else short_factor.
RopeTables rope_inv_freq(const RopeConfig& cfg, int64_t seq_len = 0);

// cos[p, j] = float(cos(inv_freq[j] * p) * attention_scaling), sin likewise, evaluated in double,
// for p < positions and j < rotary_dim / 2, row-major
// [positions, rotary_dim / 2]. (transformers' table is cat(freqs, freqs): its second half repeats
// the first, so only the first half is kept.)
struct RopeCosSinHost {
  std::vector<float> cos, sin;
  int64_t positions = 0, half = 0;
};
RopeCosSinHost rope_cos_sin_host(const RopeTables& tables, int64_t positions);

// The same tables uploaded as two f32 tensors [positions, rotary_dim / 2] (apply_rope's form).
struct RopeCosSin {
  Tensor cos, sin;
};
RopeCosSin rope_cos_sin(const RopeTables& tables, int64_t positions);

}  // namespace vkf::ops
