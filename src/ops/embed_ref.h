// CPU reference for the embedding lookup and its weight gradient, in double, from the definition
// (torch.nn.functional.embedding): out[n] = weight[ids[n]], dW[v] = sum of dy[n] over ids[n] == v.
// Ids outside [0, V) give zero rows and no gradient, as vkformer's GPU kernels document.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace vkf::ref {

// weight [V, H] row-major, ids [N] -> out [N, H].
std::vector<double> embedding(const std::vector<double>& weight, int64_t vocab, int64_t hidden,
                              const std::vector<int64_t>& ids);
// dy [N, H] -> dW [V, H]; tokens whose id is padding_idx (given in [0, V)) add nothing.
std::vector<double> embedding_backward(const std::vector<int64_t>& ids,
                                       const std::vector<double>& dy, int64_t vocab,
                                       int64_t hidden,
                                       std::optional<int64_t> padding_idx = std::nullopt);

}  // namespace vkf::ref
