// CPU references for AdamW and SGD steps (see optim_ref.h).
#include "ops/optim_ref.h"

#include <cmath>
#include <cstddef>

namespace vkf::ref {
namespace {

// Rounds through memory so that the compiler cannot contract a product into a following sum
// (GCC contracts by default where the target has FMA); torch rounds these products separately.
float rounded(float x) {
  volatile float v = x;
  return v;
}

}  // namespace

void adamw_step_f32(std::vector<float>& param, const std::vector<float>& grad,
                    std::vector<float>& exp_avg, std::vector<float>& exp_avg_sq,
                    const AdamWHyper& h, int64_t t) {
  // Python: the scalars in double.
  const double bias_correction1 = 1.0 - std::pow(h.beta1, static_cast<double>(t));
  const double bias_correction2 = 1.0 - std::pow(h.beta2, static_cast<double>(t));
  const double step_size = h.lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  // torch: the scalars as f32 operands.
  const float decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
  const float weight = static_cast<float>(1.0 - h.beta1);
  const float beta2 = static_cast<float>(h.beta2);
  const float one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  const float bc2_sqrt = static_cast<float>(bias_correction2_sqrt);
  const float eps = static_cast<float>(h.eps);
  const float neg_step_size = static_cast<float>(-step_size);
  for (size_t i = 0; i < param.size(); ++i) {
    // param.mul_(1 - lr * weight_decay) (skipped by torch when weight_decay is 0: a no-op).
    float p = h.weight_decay != 0.0 ? param[i] * decay : param[i];
    // exp_avg.lerp_(grad, 1 - beta1): vectorized torch evaluates fmadd(coeff, end - start, base).
    const float g = grad[i], m = exp_avg[i];
    const float m_new = std::fabs(weight) < 0.5f ? std::fma(weight, g - m, m)
                                                 : std::fma(weight - 1.0f, g - m, g);
    // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2): self + value * t1 * t2, which
    // torch's builds contract into fma(value * t1, t2, self).
    const float v_scaled = exp_avg_sq[i] * beta2;
    const float v_new = std::fma(rounded(one_minus_beta2 * g), g, v_scaled);
    // denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
    const float denom = std::sqrt(v_new) / bc2_sqrt + eps;
    // param.addcdiv_(exp_avg, denom, value=-step_size): self + value * t1 / t2.
    p = p + rounded(neg_step_size * m_new) / denom;
    param[i] = p;
    exp_avg[i] = m_new;
    exp_avg_sq[i] = v_new;
  }
}

void adamw_step(std::vector<double>& param, const std::vector<double>& grad,
                std::vector<double>& exp_avg, std::vector<double>& exp_avg_sq, const AdamWHyper& h,
                int64_t t) {
  const double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(h.beta2, static_cast<double>(t));
  for (size_t i = 0; i < param.size(); ++i) {
    const double g = grad[i];
    param[i] *= 1.0 - h.lr * h.weight_decay;
    exp_avg[i] = h.beta1 * exp_avg[i] + (1.0 - h.beta1) * g;
    exp_avg_sq[i] = h.beta2 * exp_avg_sq[i] + (1.0 - h.beta2) * g * g;
    const double m_hat = exp_avg[i] / bc1;
    const double denom = std::sqrt(exp_avg_sq[i]) / std::sqrt(bc2) + h.eps;
    param[i] -= h.lr * m_hat / denom;
  }
}

void sgd_step_f32(std::vector<float>& param, const std::vector<float>& grad,
                  std::vector<float>& momentum_buffer, const SGDHyper& h) {
  const float weight_decay = static_cast<float>(h.weight_decay);
  const float momentum = static_cast<float>(h.momentum);
  const float one_minus_dampening = static_cast<float>(1.0 - h.dampening);
  const float neg_lr = static_cast<float>(-h.lr);
  const bool first = momentum_buffer.empty();
  if (h.momentum != 0.0 && first) momentum_buffer.resize(param.size());
  for (size_t i = 0; i < param.size(); ++i) {
    // grad.add(param, alpha=weight_decay): torch's add with alpha is fmadd(other, alpha, self).
    float g = grad[i];
    if (h.weight_decay != 0.0) g = std::fma(param[i], weight_decay, g);
    if (h.momentum != 0.0) {
      float& b = momentum_buffer[i];
      // First step: buf = clone(grad); then buf.mul_(momentum).add_(grad, alpha=1 - dampening).
      b = first ? g : std::fma(g, one_minus_dampening, b * momentum);
      // nesterov: grad.add(buf, alpha=momentum); else grad = buf.
      g = h.nesterov ? std::fma(b, momentum, g) : b;
    }
    // param.add_(grad, alpha=-lr)
    param[i] = std::fma(g, neg_lr, param[i]);
  }
}

void sgd_step(std::vector<double>& param, const std::vector<double>& grad,
              std::vector<double>& momentum_buffer, const SGDHyper& h) {
  const bool first = momentum_buffer.empty();
  if (h.momentum != 0.0 && first) momentum_buffer.resize(param.size());
  for (size_t i = 0; i < param.size(); ++i) {
    double g = grad[i] + h.weight_decay * param[i];
    if (h.momentum != 0.0) {
      double& b = momentum_buffer[i];
      b = first ? g : h.momentum * b + (1.0 - h.dampening) * g;
      g = h.nesterov ? g + h.momentum * b : b;
    }
    param[i] -= h.lr * g;
  }
}

}  // namespace vkf::ref
