// CPU reference (double) for softmax and log-softmax over the last dimension of row-major data
// with rows of `len` values, and their gradients; written from the definitions.
#pragma once

#include <cstdint>
#include <vector>

namespace vkf::ref {

std::vector<double> softmax(const std::vector<double>& x, int64_t len);
std::vector<double> log_softmax(const std::vector<double>& x, int64_t len);
// Gradients of sum(dy * softmax(x)) and sum(dy * log_softmax(x)) with respect to x.
std::vector<double> softmax_backward(const std::vector<double>& x, const std::vector<double>& dy,
                                     int64_t len);
std::vector<double> log_softmax_backward(const std::vector<double>& x,
                                         const std::vector<double>& dy, int64_t len);

}  // namespace vkf::ref
