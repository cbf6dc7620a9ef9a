// Input checks that the decode ops (ops/decode.cpp, ops/decode_attention.cpp) share: the KV cache
// tensors and the I32 counters read on the device.
#pragma once

#include <string>

#include "core/launch.h"
#include "core/tensor.h"
#include "vk/error.h"

namespace vkf::ops::detail {

inline void check_cache(const Tensor& cache, const char* op, const char* what) {
  VKF_REQUIRE(cache.defined() && cache.dtype() == DType::F32 && cache.rank() == 4 &&
                  cache.is_contiguous() && cache.numel() > 0,
              "{}: {} must be a contiguous f32 [batch, capacity, kv_heads, head_dim] cache, got {}",
              op, what,
              cache.defined() ? shape_str(cache.shape()) + " " + dtype_name(cache.dtype())
                              : std::string("an undefined tensor"));
  checked_u32(cache.numel(), "KV cache element count");
}

inline void check_counter(const Tensor& t, const char* op, const char* what) {
  VKF_REQUIRE(t.defined() && t.dtype() == DType::I32 && t.numel() >= 1,
              "{}: {} must be an I32 tensor whose first element is read on the device", op, what);
}

}  // namespace vkf::ops::detail
