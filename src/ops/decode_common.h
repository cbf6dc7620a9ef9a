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

// A key cache and a value cache of one shape, and the counter (slot or key count) read with them.
inline void check_caches(const Tensor& cache_k, const Tensor& cache_v, const Tensor& counter,
                         const char* op, const char* counter_name) {
  check_cache(cache_k, op, "cache_k");
  check_cache(cache_v, op, "cache_v");
  check_counter(counter, op, counter_name);
  VKF_REQUIRE(cache_k.shape() == cache_v.shape(), "{}: cache_k {} and cache_v {} differ", op,
              shape_str(cache_k.shape()), shape_str(cache_v.shape()));
}

}  // namespace vkf::ops::detail
