// The attention kernels' shared parameter block and flag bits as the host fills them: mirrors of
// struct AttnParams and the FLAG_* bits in src/shaders/attention_common.glsl (used by
// ops/attention.cpp for training and inference and ops/decode.cpp for the one-query decode step).
#pragma once

#include <cstdint>

namespace vkf::ops::detail {

struct AttnParams {
  uint32_t tq, tk, hq, hkv, d, causal, window;
  int32_t q_offset;
  float scale, softcap;
};

constexpr uint32_t kAttnFlagMask = 1;     // FLAG_MASK: a key padding mask is given
constexpr uint32_t kAttnFlagDropout = 2;  // FLAG_DROPOUT: dropout parameters are given

}  // namespace vkf::ops::detail
