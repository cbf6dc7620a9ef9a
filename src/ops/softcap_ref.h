// CPU reference (double) for ops::softcap.
#pragma once

#include <vector>

namespace vkf::ref {

std::vector<double> softcap(const std::vector<double>& x, double cap);
std::vector<double> softcap_backward(const std::vector<double>& x, const std::vector<double>& dy,
                                     double cap);

}  // namespace vkf::ref
