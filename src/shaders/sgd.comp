// One SGD step per element in torch's fp32 operation order (torch.optim.SGD, foreach=False,
// _single_tensor_sgd), on contiguous f32 tensors, in place. torch's add(x, alpha=a) is one fused
// multiply-add (ufunc::add uses vec::fmadd), so every "+ alpha *" below is a single rounding
// (fma_exact, exact_fma.glsl):
//   g = fma(p, wd, g)                                (grad.add(param, alpha=wd), if wd != 0)
//   b = g on the first step, else fma(g, 1 - dampening, b * momentum)
//   g = nesterov ? fma(b, momentum, g) : b           (if momentum != 0)
//   p = fma(g, -lr, p)                               (param.add_(grad, alpha=-lr))
#version 460
#include "common.glsl"
#include "exact_fma.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

// Flags shared with optim.cpp.
#define kHasWeightDecay 1u
#define kHasMomentum 2u
#define kFirstStep 4u
#define kNesterov 8u

layout(push_constant, std430) uniform Push {
  F32Buf param;
  F32Buf grad;
  F32Buf momentum_buffer;  // unused without momentum
  uint n;
  float weight_decay;
  float momentum;
  float one_minus_dampening;
  float neg_lr;
  uint flags;
} p;

void main() {
  uint i = flat_invocation(LOCAL_SIZE);
  if (i >= p.n) return;
  float param = p.param.v[i];
  precise float g = p.grad.v[i];
  if ((p.flags & kHasWeightDecay) != 0u) g = fma_exact(param, p.weight_decay, g);
  if ((p.flags & kHasMomentum) != 0u) {
    precise float b;
    if ((p.flags & kFirstStep) != 0u) {
      b = g;
    } else {
      precise float decayed = p.momentum_buffer.v[i] * p.momentum;
      b = fma_exact(g, p.one_minus_dampening, decayed);
    }
    p.momentum_buffer.v[i] = b;
    g = (p.flags & kNesterov) != 0u ? fma_exact(b, p.momentum, g) : b;
  }
  p.param.v[i] = fma_exact(g, p.neg_lr, param);
}
