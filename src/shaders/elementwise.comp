// out[i] = OP(a, b) over f32 tensors: add, sub, mul, copy (broadcast expansion) and scale.
// `flat` reads contiguous operands of equal size (`flat4`: four elements per invocation with
// 16-byte loads and stores, where the host sees n % 4 == 0 and every operand 16-byte aligned --
// the same values, at about twice the bandwidth on the H200); `strided` decodes the flat output
// index over a merged loop nest of up to 6 dimensions, reading a and b through their own strides
// (stride 0 is a broadcast dimension). The output is contiguous and may alias a (in-place
// accumulation), since each invocation reads and writes only its own element.
//!novariant_base
//!variant flat -DSTRIDED=0
//!variant flat4 -DSTRIDED=0 -DVEC4=1
//!variant strided -DSTRIDED=1
#version 460
#include "common.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

#define OP_ADD 0u
#define OP_SUB 1u
#define OP_MUL 2u
#define OP_COPY 3u   // out = a (b unused)
#define OP_SCALE 4u  // out = a * alpha (b unused)
layout(constant_id = 0) const uint OP = OP_ADD;

layout(push_constant, std430) uniform Push {
  F32Buf a;
  F32Buf b;
  F32Buf out_;
  uint n;
  uint rank;
  float alpha;
  uint shape[6];
  int a_strides[6];
  int b_strides[6];
} p;

float op_value(float x, float y) {
  if (OP == OP_ADD) return x + y;
  if (OP == OP_SUB) return x - y;
  if (OP == OP_MUL) return x * y;
  if (OP == OP_SCALE) return x * p.alpha;
  return x;
}

void main() {
  uint i = flat_invocation(LOCAL_SIZE);
#if VEC4
  if (4u * i >= p.n) return;
  const vec4 x = Vec4Buf(uint64_t(p.a)).v[i];
  const vec4 y = OP <= OP_MUL ? Vec4Buf(uint64_t(p.b)).v[i] : vec4(0.0);
  vec4 r;
  for (uint e = 0; e < 4u; ++e) r[e] = op_value(x[e], y[e]);
  Vec4Buf(uint64_t(p.out_)).v[i] = r;
#else
  if (i >= p.n) return;
#if STRIDED
  int ia = 0, ib = 0;
  uint rest = i;
  for (int d = int(p.rank) - 1; d >= 0; --d) {
    uint extent = p.shape[d];
    int coord = int(rest % extent);
    rest /= extent;
    ia += coord * p.a_strides[d];
    ib += coord * p.b_strides[d];
  }
#else
  uint ia = i, ib = i;
#endif
  const float x = p.a.v[ia];
  p.out_.v[i] = op_value(x, OP <= OP_MUL ? p.b.v[ib] : 0.0);
#endif
}
