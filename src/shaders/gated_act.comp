// Gated activations (SwiGLU, GeGLU, ...): out = act(gate) * up, and its backward
// d_gate = dy * up * act'(gate), d_up = dy * act(gate) in one pass. Element i of the [rows, inner]
// output sits in row i / inner, column i % inner; gate, up and their gradients are addressed as
// base + row * row_stride + column, which covers both separate contiguous gate/up tensors
// (row_stride = inner) and the two halves of one fused gate_up tensor (row_stride = 2 * inner).
// ACT (spec constant) picks the activation, see activation.glsl.
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
  F32Buf gate;
  F32Buf up;
  F32Buf dy;      // bwd: [rows, inner] contiguous
  F32Buf out_;    // fwd: [rows, inner] contiguous;  bwd: d_gate (row stride gate_stride)
  F32Buf d_up;    // bwd: row stride up_stride
  uint n;
  uint inner;
  uint gate_stride;
  uint up_stride;
} p;

void main() {
  uint i = flat_invocation(LOCAL_SIZE);
  if (i >= p.n) return;
  uint row = i / p.inner, col = i % p.inner;
  uint ig = row * p.gate_stride + col, iu = row * p.up_stride + col;
  float g = p.gate.v[ig], u = p.up.v[iu];
#if BACKWARD
  const VACC d = VACC(p.dy.v[i]);
  p.out_.v[ig] = float(d * VACC(u) * act_grad_acc(g));
  p.d_up.v[iu] = float(d * act_value_acc(g));
#else
  p.out_.v[i] = float(act_value_acc(g) * VACC(u));
#endif
}
