// Gated activations (SwiGLU, GeGLU, ...): out = act(gate) * up, and its backward
// d_gate = dy * up * act'(gate), d_up = dy * act(gate) in one pass. Element i of the [rows, inner]
// output sits in row i / inner, column i % inner; gate, up and their gradients are addressed as
// base + row * row_stride + column, which covers both separate contiguous gate/up tensors
// (row_stride = inner) and the two halves of one fused gate_up tensor (row_stride = 2 * inner).
// ACT (spec constant) picks the activation, see activation.glsl. The fwd4 / bwd4 builds take four
// consecutive elements of a row per invocation with 16-byte loads and stores, where the host sees
// inner and both row strides multiples of 4 and every operand 16-byte aligned: the same formula
// per element. The fwd_h / fwd4_h builds store the output as f16 bits, and the bwd_h / bwd4_h
// builds both gradients (f16_round.glsl's f16_bits: the rounding of convert.comp and Tensor::to),
// for tensor-core products that read them as their f16 operands (ops::gated_projection,
// ops::gated_mlp): the bits that converting the f32 results would give.
//!novariant_base
//!variant fwd -DBACKWARD=0
//!variant bwd -DBACKWARD=1
//!variant fwd4 -DBACKWARD=0 -DVEC4=1
//!variant bwd4 -DBACKWARD=1 -DVEC4=1
//!variant fwd_h -DBACKWARD=0 -DOUT_F16=1
//!variant fwd4_h -DBACKWARD=0 -DVEC4=1 -DOUT_F16=1
//!variant bwd_h -DBACKWARD=1 -DOUT_F16=1
//!variant bwd4_h -DBACKWARD=1 -DVEC4=1 -DOUT_F16=1
//!precise
#version 460
#include "common.glsl"
#include "precise_math.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;
#include "activation.glsl"
#ifndef OUT_F16
#define OUT_F16 0
#endif
#if OUT_F16
#include "f16_round.glsl"
// Four halves of the f16 output, packed in pairs (8-byte stores).
layout(buffer_reference, std430, buffer_reference_align = 8) buffer U2Buf { uvec2 v[]; };
#endif

layout(push_constant, std430) uniform Push {
  F32Buf gate;
  F32Buf up;
  F32Buf dy;      // bwd: [rows, inner] contiguous
#if OUT_F16
  U16Buf out_;    // the same in f16 (_h builds)
  U16Buf d_up;
#else
  F32Buf out_;    // fwd: [rows, inner] contiguous;  bwd: d_gate (row stride gate_stride)
  F32Buf d_up;    // bwd: row stride up_stride
#endif
  uint n;
  uint inner;
  uint gate_stride;
  uint up_stride;
} p;

// One element's values, shared by both builds: the forward product, and the gate's and up's
// gradients for the incoming gradient dy.
float gated_value(float g, float u) { return float(act_value_acc(g) * VACC(u)); }
void gated_grads(float dy, float g, float u, out float dg, out float du) {
  const VACC d = VACC(dy);
  dg = float(d * VACC(u) * act_grad_acc(g));
  du = float(d * act_value_acc(g));
}

#if VEC4
void main() {
  const uint i = flat_invocation(LOCAL_SIZE);  // elements 4i .. 4i + 3, one row
  if (4u * i >= p.n) return;
  const uint row = 4u * i / p.inner, col = 4u * i % p.inner;
  const uint ig = (row * p.gate_stride + col) / 4u, iu = (row * p.up_stride + col) / 4u;
  const vec4 g = Vec4Buf(uint64_t(p.gate)).v[ig], u = Vec4Buf(uint64_t(p.up)).v[iu];
#if BACKWARD
  const vec4 dy = Vec4Buf(uint64_t(p.dy)).v[i];
  vec4 dg, du;
  for (uint e = 0; e < 4u; ++e) gated_grads(dy[e], g[e], u[e], dg[e], du[e]);
#if OUT_F16
  U2Buf(uint64_t(p.out_)).v[ig] =
      uvec2(f16_bits(dg.x) | (f16_bits(dg.y) << 16), f16_bits(dg.z) | (f16_bits(dg.w) << 16));
  U2Buf(uint64_t(p.d_up)).v[iu] =
      uvec2(f16_bits(du.x) | (f16_bits(du.y) << 16), f16_bits(du.z) | (f16_bits(du.w) << 16));
#else
  Vec4Buf(uint64_t(p.out_)).v[ig] = dg;
  Vec4Buf(uint64_t(p.d_up)).v[iu] = du;
#endif
#else
  vec4 r;
  for (uint e = 0; e < 4u; ++e) r[e] = gated_value(g[e], u[e]);
#if OUT_F16
  U2Buf(uint64_t(p.out_)).v[i] =
      uvec2(f16_bits(r.x) | (f16_bits(r.y) << 16), f16_bits(r.z) | (f16_bits(r.w) << 16));
#else
  Vec4Buf(uint64_t(p.out_)).v[i] = r;
#endif
#endif
}
#else
void main() {
  uint i = flat_invocation(LOCAL_SIZE);
  if (i >= p.n) return;
  uint row = i / p.inner, col = i % p.inner;
  uint ig = row * p.gate_stride + col, iu = row * p.up_stride + col;
  float g = p.gate.v[ig], u = p.up.v[iu];
#if BACKWARD
  float dg, du;
  gated_grads(p.dy.v[i], g, u, dg, du);
#if OUT_F16
  p.out_.v[ig] = uint16_t(f16_bits(dg));
  p.d_up.v[iu] = uint16_t(f16_bits(du));
#else
  p.out_.v[ig] = dg;
  p.d_up.v[iu] = du;
#endif
#elif OUT_F16
  p.out_.v[i] = uint16_t(f16_bits(gated_value(g, u)));
#else
  p.out_.v[i] = gated_value(g, u);
#endif
}
#endif
