// Broadcasting and dimension merging for strided kernels (see strided.h).
#include "ops/strided.h"

#include <algorithm>

#include "vk/error.h"

namespace vkf::ops::detail {

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    // Right-aligned: dimension i of the result pairs a[i - (rank - a.size())] with b likewise.
    const int64_t da = i + a.size() >= rank ? a[i + a.size() - rank] : 1;
    const int64_t db = i + b.size() >= rank ? b[i + b.size() - rank] : 1;
    VKF_REQUIRE(da == db || da == 1 || db == 1,
                "{}: shapes {} and {} do not broadcast (dimension {} from the right: {} vs {}; "
                "sizes must match or one must be 1)",
                op, shape_str(a), shape_str(b), rank - i, da, db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Shape broadcast_strides(const Tensor& t, const Shape& out) {
  const size_t lead = out.size() - t.shape().size();
  Shape strides(out.size(), 0);
  for (size_t i = 0; i < t.shape().size(); ++i) {
    if (t.shape()[i] != 1) strides[lead + i] = t.strides()[i];
  }
  return strides;
}

LoopNest merge(const Shape& shape, const std::vector<Shape>& strides) {
  LoopNest nest;
  nest.strides.resize(strides.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool fuse = !nest.shape.empty();
    // Fusing the previous (outer) kept dimension with d needs outer stride = inner stride * size.
    for (size_t k = 0; fuse && k < strides.size(); ++k)
      fuse = nest.strides[k].back() == strides[k][d] * shape[d];
    if (fuse) {
      nest.shape.back() *= shape[d];
      for (size_t k = 0; k < strides.size(); ++k) nest.strides[k].back() = strides[k][d];
    } else {
      nest.shape.push_back(shape[d]);
      for (size_t k = 0; k < strides.size(); ++k) nest.strides[k].push_back(strides[k][d]);
    }
  }
  return nest;
}

}  // namespace vkf::ops::detail
