// The host side of shaders/token_ids.glsl, for ops whose kernels read integer token ids or labels
// of either dtype: which build of a kernel reads a dtype, and a 64-bit id (such as ignore_index)
// as the two 32-bit halves the kernels compare.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace vkf::ops::detail {

// The suffix of the kernel build that reads ids of dtype t (I32 or I64): "i32" or "i64".
inline const char* id_variant(DType t) { return t == DType::I64 ? "i64" : "i32"; }

struct IdHalves {
  int32_t lo, hi;
};
// v as (low, high) 32-bit halves, as id_halves() in token_ids.glsl sees an id.
inline IdHalves id_halves(int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  return {static_cast<int32_t>(static_cast<uint32_t>(u)),
          static_cast<int32_t>(static_cast<uint32_t>(u >> 32))};
}

}  // namespace vkf::ops::detail
