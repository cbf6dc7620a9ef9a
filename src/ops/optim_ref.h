// CPU references for one optimizer step of one tensor, two ways each:
//  - *_f32: torch's fp32 arithmetic emulated operation by operation (torch.optim.AdamW / SGD,
//    foreach=False): the scalars in double as Python computes them, then rounded to float, then
//    float operations in torch's order, fused multiply-adds exactly where torch's kernels fuse
//    them (lerp_, add_ with alpha, addcmul_ as compiled). Checked against torch 2.11's CPU
//    output: SGD and AdamW's moments agree bitwise, AdamW's parameters to within the odd ulp of
//    torch's (MKL) sqrt. Used to check the GPU to within a few ulp.
//  - the plain double version of the same mathematics, the ground truth.
#pragma once

#include <cstdint>
#include <vector>

namespace vkf::ref {

struct AdamWHyper {
  double lr, beta1, beta2, eps, weight_decay;
};

// Step number t >= 1.
void adamw_step_f32(std::vector<float>& param, const std::vector<float>& grad,
                    std::vector<float>& exp_avg, std::vector<float>& exp_avg_sq,
                    const AdamWHyper& h, int64_t t);
void adamw_step(std::vector<double>& param, const std::vector<double>& grad,
                std::vector<double>& exp_avg, std::vector<double>& exp_avg_sq, const AdamWHyper& h,
                int64_t t);

struct SGDHyper {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
};

// momentum_buffer is empty before the first step (torch's None) and filled by it.
void sgd_step_f32(std::vector<float>& param, const std::vector<float>& grad,
                  std::vector<float>& momentum_buffer, const SGDHyper& h);
void sgd_step(std::vector<double>& param, const std::vector<double>& grad,
              std::vector<double>& momentum_buffer, const SGDHyper& h);

}  // namespace vkf::ref
