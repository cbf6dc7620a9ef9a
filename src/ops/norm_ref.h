// CPU references for RMSNorm and LayerNorm in double, written from the definitions (transformers'
// LlamaRMSNorm / GemmaRMSNorm, torch.nn.LayerNorm): forward and the gradients for x, w, b.
// x is [rows, h] row-major; an empty weight/bias vector means "none".
#pragma once

#include <cstdint>
#include <vector>

namespace vkf::ref {

struct NormGrads {
  std::vector<double> dx, dw, db;  // dw/db empty when there is no weight/bias
};

// y = x * (mean(x^2) + eps)^-1/2 * w'  with w' = w, 1 + w (one_plus) or 1 (w empty).
std::vector<double> rms_norm(const std::vector<double>& x, const std::vector<double>& w,
                             int64_t rows, int64_t h, double eps, bool one_plus);
NormGrads rms_norm_backward(const std::vector<double>& x, const std::vector<double>& w,
                            const std::vector<double>& dy, int64_t rows, int64_t h, double eps,
                            bool one_plus);

// y = (x - mean) * (var + eps)^-1/2 * w + b, var = mean((x - mean)^2).
std::vector<double> layer_norm(const std::vector<double>& x, const std::vector<double>& w,
                               const std::vector<double>& b, int64_t rows, int64_t h, double eps);
NormGrads layer_norm_backward(const std::vector<double>& x, const std::vector<double>& w,
                              const std::vector<double>& b, const std::vector<double>& dy,
                              int64_t rows, int64_t h, double eps);

}  // namespace vkf::ref
