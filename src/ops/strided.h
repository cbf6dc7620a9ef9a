// Loop nests for the strided elementwise and reduction kernels: numpy broadcasting of shapes,
// the strides of an operand seen through a broadcast, and the merging of dimensions that are laid
// out alike in every operand, so that kernels decode as few dimensions as possible (a contiguous
// tensor becomes one dimension; x[M,N] + bias[N] stays two). Internal to src/ops.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace vkf::ops::detail {

// Dimensions a strided kernel decodes (shape and strides travel in push constants).
constexpr int kMaxKernelDims = 6;

// The numpy/torch broadcast of two shapes (aligned from the right; a size-1 or missing dimension
// takes the other's size). Throws a vkf::Error naming `op` when a pair of sizes is incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Strides (in elements) that read `t` as if it had shape `out`: t's dimensions right-aligned with
// out's, with stride 0 where t is broadcast. t's shape must broadcast to `out`.
Shape broadcast_strides(const Tensor& t, const Shape& out);

// One loop nest over `shape`, with one stride vector per operand. `merge` drops size-1 dimensions
// and fuses neighbours that every operand walks contiguously; the result visits the same elements
// in the same row-major order. A nest that merges to nothing has rank 0 (one element).
struct LoopNest {
  Shape shape;
  std::vector<Shape> strides;  // [operand][dim]
  int rank() const { return static_cast<int>(shape.size()); }
};
LoopNest merge(const Shape& shape, const std::vector<Shape>& strides);

}  // namespace vkf::ops::detail
