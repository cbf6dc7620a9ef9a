// CPU reference (double) for the activations and gated activations, written from transformers'
// formulas (activations.py) and their analytic derivatives, independent of the GPU code.
#pragma once

#include <vector>

#include "ops/activation.h"

namespace vkf::ref {

double act(ops::Activation kind, double x);
double act_grad(ops::Activation kind, double x);  // d act / dx

std::vector<double> activation(ops::Activation kind, const std::vector<double>& x);
std::vector<double> activation_backward(ops::Activation kind, const std::vector<double>& x,
                                        const std::vector<double>& dy);

// act(gate) * up, elementwise.
std::vector<double> gated(ops::Activation kind, const std::vector<double>& gate,
                          const std::vector<double>& up);
void gated_backward(ops::Activation kind, const std::vector<double>& gate,
                    const std::vector<double>& up, const std::vector<double>& dy,
                    std::vector<double>& d_gate, std::vector<double>& d_up);

// Splits rows of 2*inner values into their two halves (first, second), as torch.chunk(2, -1).
void split_halves(const std::vector<double>& x, int64_t inner, std::vector<double>& first,
                  std::vector<double>& second);
// The inverse: rows of first then second.
std::vector<double> join_halves(const std::vector<double>& first, const std::vector<double>& second,
                                int64_t inner);

}  // namespace vkf::ref
