// CPU reference for broadcasting elementwise ops (see elementwise_ref.h).
#include "ops/elementwise_ref.h"

#include <algorithm>
#include <stdexcept>

namespace vkf::ref {
namespace {

// Row-major index into a tensor of shape `in` of the element that output coordinate `coord`
// (of a shape of rank coord.size() >= in.size()) reads under broadcasting.
int64_t source_index(const std::vector<int64_t>& coord, const Shape& in) {
  const size_t lead = coord.size() - in.size();
  int64_t idx = 0;
  for (size_t d = 0; d < in.size(); ++d) idx = idx * in[d] + (in[d] == 1 ? 0 : coord[lead + d]);
  return idx;
}

// Visits every coordinate of `shape` in row-major order.
template <typename F>
void for_each_coord(const Shape& shape, F&& f) {
  std::vector<int64_t> coord(shape.size(), 0);
  const int64_t n = shape_numel(shape);
  for (int64_t i = 0; i < n; ++i) {
    f(i, coord);
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      if (++coord[d] < shape[d]) break;
      coord[d] = 0;
    }
  }
}

}  // namespace

Shape broadcast(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) throw std::invalid_argument("ref::broadcast: incompatible");
    out[i] = std::max(da, db);
  }
  return out;
}

std::vector<double> binary(Binary op, const std::vector<double>& a, const Shape& sa,
                           const std::vector<double>& b, const Shape& sb) {
  const Shape so = broadcast(sa, sb);
  std::vector<double> out(static_cast<size_t>(shape_numel(so)));
  for_each_coord(so, [&](int64_t i, const std::vector<int64_t>& c) {
    const double x = a[source_index(c, sa)], y = b[source_index(c, sb)];
    out[i] = op == Binary::Add ? x + y : op == Binary::Sub ? x - y : x * y;
  });
  return out;
}

void binary_backward(Binary op, const std::vector<double>& a, const Shape& sa,
                     const std::vector<double>& b, const Shape& sb, const std::vector<double>& dy,
                     std::vector<double>& da, std::vector<double>& db) {
  const Shape so = broadcast(sa, sb);
  da.assign(a.size(), 0.0);
  db.assign(b.size(), 0.0);
  for_each_coord(so, [&](int64_t i, const std::vector<int64_t>& c) {
    const int64_t ia = source_index(c, sa), ib = source_index(c, sb);
    switch (op) {
      case Binary::Add:
        da[ia] += dy[i];
        db[ib] += dy[i];
        break;
      case Binary::Sub:
        da[ia] += dy[i];
        db[ib] -= dy[i];
        break;
      case Binary::Mul:
        da[ia] += dy[i] * b[ib];
        db[ib] += dy[i] * a[ia];
        break;
    }
  });
}

std::vector<double> expand(const std::vector<double>& x, const Shape& sx, const Shape& to) {
  std::vector<double> out(static_cast<size_t>(shape_numel(to)));
  for_each_coord(to, [&](int64_t i, const std::vector<int64_t>& c) { out[i] = x[source_index(c, sx)]; });
  return out;
}

std::vector<double> sum_to_shape(const std::vector<double>& x, const Shape& sx, const Shape& to) {
  std::vector<double> out(static_cast<size_t>(shape_numel(to)), 0.0);
  for_each_coord(sx, [&](int64_t i, const std::vector<int64_t>& c) { out[source_index(c, to)] += x[i]; });
  return out;
}

}  // namespace vkf::ref
