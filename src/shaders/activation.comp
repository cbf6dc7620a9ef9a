// y = act(x) (fwd) and dx = dy * act'(x) (bwd) over contiguous f32 tensors; ACT (spec constant)
// picks the activation, see activation.glsl.
//!novariant_base
//!variant fwd -DBACKWARD=0
//!variant bwd -DBACKWARD=1
//!precise
#version 460
#include "common.glsl"
#include "precise_math.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;
#include "activation.glsl"

layout(push_constant, std430) uniform Push {
  F32Buf x;
  F32Buf dy;  // bwd only
  F32Buf out_;
  uint n;
} p;

void main() {
  uint i = flat_invocation(LOCAL_SIZE);
  if (i >= p.n) return;
  float x = p.x.v[i];
#if BACKWARD
  p.out_.v[i] = float(VACC(p.dy.v[i]) * act_grad_acc(x));
#else
  p.out_.v[i] = float(act_value_acc(x));
#endif
}
