// CPU reference of attention in double (see ops/attention.h for the semantics): the plain
// scores -> masks -> soft-cap -> softmax -> weighted sum, and its backward derived from the math.
// Used by the tests as the independent oracle for the fused GPU kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/attention.h"

namespace vkf::ref {

struct AttentionShape {
  int64_t batch, tq, tk, hq, hkv, d;
};

// q [B, Tq, Hq, D], k and v [B, Tk, Hkv, D], row-major. key_padding_mask: empty for none, else
// B * Tk values, nonzero = token. Returns [B, Tq, Hq, D]; rows that see no key are zero.
std::vector<double> attention(const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v,
                              const std::vector<int64_t>& key_padding_mask,
                              const AttentionShape& shape, const ops::AttentionOptions& opts);

struct AttentionGrads {
  std::vector<double> dq, dk, dv;
};

// Gradients of sum(dout * attention(q, k, v)).
AttentionGrads attention_backward(const std::vector<double>& q, const std::vector<double>& k,
                                  const std::vector<double>& v,
                                  const std::vector<int64_t>& key_padding_mask,
                                  const std::vector<double>& dout, const AttentionShape& shape,
                                  const ops::AttentionOptions& opts);

}  // namespace vkf::ref
