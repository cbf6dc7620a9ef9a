// One AdamW step per element in torch's fp32 operation order (torch.optim.AdamW, foreach=False,
// _single_tensor_adam with decoupled weight decay), on contiguous f32 tensors, in place:
//   p *= 1 - lr*wd                                (param.mul_)
//   m  = fma(w, g - m, m)                         (exp_avg.lerp_(g, w = 1 - beta1); for w >= 0.5
//                                                  fma(w - 1, g - m, g), as torch's lerp does)
//   v  = fma((1 - beta2) * g, g, v * beta2)       (exp_avg_sq.mul_(beta2).addcmul_(g, g, 1 - beta2))
//   p += (-step_size * m) / (sqrt(v) / sqrt(bc2) + eps)   (param.addcdiv_(m, denom, -step_size))
// The fused multiply-adds are where torch's kernels fuse: lerp's vectorized form calls fmadd, and
// addcmul's `self + value * t1 * t2` is contracted by the compiler in torch's CPU and CUDA builds
// (checked against torch 2.11's CPU output: exp_avg and exp_avg_sq agree bitwise). They are
// rounded once on every device by fma_exact. The scalars are computed by the host in double, as
// Python does, and arrive rounded to f32, as torch uses them; `precise` keeps every other product
// and sum separately rounded. What can still differ is sqrt and division: Vulkan does not require
// them correctly rounded (lavapipe rounds them correctly; torch's CPU sqrt, MKL's, is itself off
// by an ulp now and then).
// A replayed step (train/step_runner.h) reads decay, bc2_sqrt and neg_step_size from `scalars` in
// device memory, refreshed by the host before each replay, instead of from the push constants.
// Mixed precision (train/optimizer_step.h): the gradient is first multiplied by grad_multiplier
// (GradScaler's 1 / scale when nothing unscaled it before; exactly 1 otherwise, which changes no
// bit), and with `gated` set, a nonzero found_inf (written by grad_overflow_norm.comp) makes the
// kernel leave the parameter and both moments untouched: torch's GradScaler skips the whole
// optimizer.step() on overflow, decided here on the device so the host need not wait for it.
#version 460
#include "common.glsl"
#include "exact_fma.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

layout(push_constant, std430) uniform Push {
  F32Buf param;
  F32Buf grad;
  F32Buf exp_avg;
  F32Buf exp_avg_sq;
  F32Buf found_inf;      // read only when gated != 0
  uint n;
  float decay;           // 1 - lr * weight_decay
  float lerp_coeff;      // w = 1 - beta1 when |w| < 0.5, else w - 1 (torch's lerp from the end)
  uint lerp_from_grad;   // 0: m + w (g - m); 1: g + (w - 1) (g - m)
  float beta2;
  float one_minus_beta2;
  float bc2_sqrt;        // sqrt(1 - beta2^t)
  float eps;
  float neg_step_size;   // -lr / (1 - beta1^t)
  float grad_multiplier; // 1, or 1 / loss scale
  uint gated;            // 1: skip the update when found_inf.v[0] != 0
  F32Buf scalars;        // 0, or [decay, bc2_sqrt, neg_step_size] in device memory (a replayed step)
} p;

void main() {
  uint i = flat_invocation(LOCAL_SIZE);
  if (i >= p.n) return;
  if (p.gated != 0u && p.found_inf.v[0] != 0.0) return;
  float decay = p.decay, bc2_sqrt = p.bc2_sqrt, neg_step_size = p.neg_step_size;
  if (uint64_t(p.scalars) != 0ul) {
    decay = p.scalars.v[0];
    bc2_sqrt = p.scalars.v[1];
    neg_step_size = p.scalars.v[2];
  }
  precise float g = p.grad.v[i] * p.grad_multiplier;
  float m = p.exp_avg.v[i];
  float v = p.exp_avg_sq.v[i];
  precise float param = p.param.v[i] * decay;
  precise float diff = g - m;
  precise float m_new = fma_exact(p.lerp_coeff, diff, p.lerp_from_grad != 0u ? g : m);
  precise float v_scaled = v * p.beta2;
  precise float g_scaled = p.one_minus_beta2 * g;
  precise float v_new = fma_exact(g_scaled, g, v_scaled);
  precise float denom = sqrt(v_new) / bc2_sqrt + p.eps;
  precise float update = (neg_step_size * m_new) / denom;
  p.param.v[i] = param + update;
  p.exp_avg.v[i] = m_new;
  p.exp_avg_sq.v[i] = v_new;
}
