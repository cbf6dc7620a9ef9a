// CPU reference (double) for broadcasting elementwise ops and their gradients: written from the
// numpy broadcasting rules, independent of the GPU code. Tensors are row-major std::vector<double>
// with an explicit shape.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace vkf::ref {

enum class Binary { Add, Sub, Mul };

// numpy broadcast of two shapes; the shapes must be compatible.
Shape broadcast(const Shape& a, const Shape& b);

// out = a op b with broadcasting; out has shape broadcast(sa, sb).
std::vector<double> binary(Binary op, const std::vector<double>& a, const Shape& sa,
                           const std::vector<double>& b, const Shape& sb);
// Gradients of sum(dy * (a op b)) with respect to a and b.
void binary_backward(Binary op, const std::vector<double>& a, const Shape& sa,
                     const std::vector<double>& b, const Shape& sb, const std::vector<double>& dy,
                     std::vector<double>& da, std::vector<double>& db);

// x of shape sx broadcast to shape `to`.
std::vector<double> expand(const std::vector<double>& x, const Shape& sx, const Shape& to);
// The adjoint of expand: x of shape sx summed down to shape `to` (to broadcasts to sx).
std::vector<double> sum_to_shape(const std::vector<double>& x, const Shape& sx, const Shape& to);

}  // namespace vkf::ref
