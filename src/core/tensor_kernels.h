// The few GPU kernels the core itself needs: strided copy, fill, dtype conversion and the f32
// addition autodiff accumulates with. Not differentiable; ops build differentiable versions.
#pragma once

#include "core/tensor.h"

namespace vkf::detail {

// dst = src, same shape and dtype, any strides. Views that are rows of contiguous elements on both
// sides (contiguous(), copies into column slices) take copy_rows.comp, the rest copy_strided.comp.
void copy_strided(const Tensor& src, const Tensor& dst);
void fill(const Tensor& dst, float value);
Tensor convert(const Tensor& src, DType dtype);            // src contiguous
Tensor add(const Tensor& a, const Tensor& b);              // f32, same shape
void add_inplace(const Tensor& dst, const Tensor& src);    // dst contiguous f32
// out = a + alpha * b, contiguous f32 tensors of the same size; out may alias a.
void axpy(const Tensor& a, const Tensor& b, float alpha, const Tensor& out);

}  // namespace vkf::detail
