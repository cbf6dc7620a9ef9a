// AdamW over a list of tensors in one dispatch (ops::AdamW::step, ops::adamw_update): one step per
// element in torch's fp32 operation order (torch.optim.AdamW, foreach=False, _single_tensor_adam
// with decoupled weight decay), on contiguous f32 tensors, in place:
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
//
// The tensors come as a list (multi_tensor.glsl): workgroup g updates chunk g, 4096 elements of
// one tensor, with 16-byte loads where the tensor's addresses allow and the chunk is whole. Each
// tensor's step scalars (decay, bc2_sqrt, neg_step_size) come from its record, or, in a replayed
// step (train/step_runner.h), from entry `scalar_index` of the `scalars` table in device memory,
// which the host refreshes before each replay.
// Mixed precision and clipping (train/optimizer_step.h), all decided on the device so the host
// need not wait: the gradient is used as
//   CLIP == 0: g * grad_multiplier (GradScaler's 1 / scale when nothing unscaled it; exactly 1
//              otherwise, which changes no bit);
//   CLIP == 1: (g * unscale) * c with c = min(1, max_norm / (norm + 1e-6)) formed from the norm
//              in device memory by grad_clip.glsl, as scale_by_scalar.comp forms it:
//              GradScaler.unscale_ and clip_grad_norm_'s in-place multiplies, each rounded on its
//              own, without writing the gradient back (unscale 1 is exact: plain clipping);
// and with `gated` set, a nonzero found_inf (written by grad_overflow_norm.comp) makes the kernel
// leave every parameter and both moments untouched: torch's GradScaler skips the whole
// optimizer.step() on overflow.
#version 460
#include "common.glsl"
#include "exact_fma.glsl"
#include "grad_clip.glsl"
#include "multi_tensor.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

layout(constant_id = 0) const uint CLIP = 0;

layout(push_constant, std430) uniform Push {
  TensorRecords table;
  F32Buf found_inf;      // read only when gated != 0
  F32Buf clip_norm;      // CLIP: the total norm of the unscaled gradients
  F32Buf scalars;        // 0, or [decay, bc2_sqrt, neg_step_size] per table entry (a replayed step)
  uint count;            // records
  uint chunks;           // chunks over all records
  float lerp_coeff;      // w = 1 - beta1 when |w| < 0.5, else w - 1 (torch's lerp from the end)
  uint lerp_from_grad;   // 0: m + w (g - m); 1: g + (w - 1) (g - m)
  float beta2;
  float one_minus_beta2;
  float eps;
  float grad_multiplier; // CLIP == 0: 1, or 1 / loss scale
  float max_norm;        // CLIP
  float unscale;         // CLIP: 1 / loss scale, or 1
  uint gated;            // 1: skip the update when found_inf.v[0] != 0
} p;

float decay, bc2_sqrt, neg_step_size, clip_coeff;

float gradient(float x) {
  if (CLIP != 0) {
    precise float unscaled = x * p.unscale;
    precise float clipped = unscaled * clip_coeff;
    return clipped;
  }
  precise float g = x * p.grad_multiplier;
  return g;
}

// One element: the parameter, both moments and the raw gradient in, the updated values out.
void update(inout float param, inout float m, inout float v, float raw_grad) {
  precise float g = gradient(raw_grad);
  precise float decayed = param * decay;
  precise float diff = g - m;
  precise float m_new = fma_exact(p.lerp_coeff, diff, p.lerp_from_grad != 0u ? g : m);
  precise float v_scaled = v * p.beta2;
  precise float g_scaled = p.one_minus_beta2 * g;
  precise float v_new = fma_exact(g_scaled, g, v_scaled);
  precise float denom = sqrt(v_new) / bc2_sqrt + p.eps;
  precise float step = (neg_step_size * m_new) / denom;
  precise float param_new = decayed + step;
  param = param_new;
  m = m_new;
  v = v_new;
}

void main() {
  const uint g = flat_group();
  if (g >= p.chunks) return;  // the folded grid's spare workgroups
  if (p.gated != 0u && p.found_inf.v[0] != 0.0) return;
  const TensorRecord rec = p.table.r[record_of_chunk(p.table, p.count, g)];
  decay = rec.decay;
  bc2_sqrt = rec.bc2_sqrt;
  neg_step_size = rec.neg_step_size;
  if (uint64_t(p.scalars) != 0ul) {
    const uint s = 3u * rec.scalar_index;
    decay = p.scalars.v[s];
    bc2_sqrt = p.scalars.v[s + 1u];
    neg_step_size = p.scalars.v[s + 2u];
  }
  if (CLIP != 0) clip_coeff = clip_coefficient(p.clip_norm.v[0], p.max_norm);
  const uint start = (g - rec.first_chunk) * MULTI_CHUNK;
  const uint end = min(rec.n, start + MULTI_CHUNK);
  const uint t = gl_LocalInvocationID.x;
  if (rec.aligned != 0u && end - start == MULTI_CHUNK) {
    // A whole chunk: 1024 vec4 per tensor, four per invocation, all loads issued first.
    Vec4Buf param4 = Vec4Buf(rec.param), grad4 = Vec4Buf(rec.grad);
    Vec4Buf m4 = Vec4Buf(rec.exp_avg), v4 = Vec4Buf(rec.exp_avg_sq);
    const uint base = start / 4u + t;
    vec4 pv[4], gv[4], mv[4], vv[4];
    for (uint j = 0u; j < 4u; ++j) {
      const uint i = base + j * LOCAL_SIZE;
      pv[j] = param4.v[i];
      gv[j] = grad4.v[i];
      mv[j] = m4.v[i];
      vv[j] = v4.v[i];
    }
    for (uint j = 0u; j < 4u; ++j) {
      for (uint c = 0u; c < 4u; ++c) update(pv[j][c], mv[j][c], vv[j][c], gv[j][c]);
      const uint i = base + j * LOCAL_SIZE;
      param4.v[i] = pv[j];
      m4.v[i] = mv[j];
      v4.v[i] = vv[j];
    }
    return;
  }
  F32Buf param1 = F32Buf(rec.param), grad1 = F32Buf(rec.grad);
  F32Buf m1 = F32Buf(rec.exp_avg), v1 = F32Buf(rec.exp_avg_sq);
  for (uint i = start + t; i < end; i += LOCAL_SIZE) {
    float pe = param1.v[i], me = m1.v[i], ve = v1.v[i];
    update(pe, me, ve, grad1.v[i]);
    param1.v[i] = pe;
    m1.v[i] = me;
    v1.v[i] = ve;
  }
}
