// Input validation shared by the ops in src/ops: every public op checks its tensors with these so
// that a bad call fails with a vkf::Error naming the op, the argument, what was seen and what was
// expected.
#pragma once

#include "core/tensor.h"
#include "vk/error.h"

namespace vkf::ops::detail {

// t must be defined, f32 and non-empty.
inline void check_f32(const Tensor& t, const char* op, const char* arg) {
  VKF_REQUIRE(t.defined(), "{}: argument '{}' is an undefined tensor", op, arg);
  VKF_REQUIRE(t.dtype() == DType::F32, "{}: argument '{}' has dtype {} (shape {}); expected f32",
              op, arg, dtype_name(t.dtype()), shape_str(t.shape()));
  VKF_REQUIRE(t.numel() > 0, "{}: argument '{}' has shape {} with no elements; expected a non-empty tensor",
              op, arg, shape_str(t.shape()));
}

}  // namespace vkf::ops::detail
