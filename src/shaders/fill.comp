// view[...] = value for a view of rank <= 6, by element width; `value` holds the bit pattern.
//!novariant_base
//!variant b16 -DELEM_BITS=16
//!variant b32 -DELEM_BITS=32
//!variant b64 -DELEM_BITS=64
#version 460
#include "common.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

#if ELEM_BITS == 16
#define BUF U16Buf
#define VALUE uint16_t(p.value_lo)
#elif ELEM_BITS == 32
#define BUF U32Buf
#define VALUE p.value_lo
#else
#define BUF U64Buf
#define VALUE (uint64_t(p.value_hi) << 32 | uint64_t(p.value_lo))
#endif

layout(push_constant, std430) uniform Push {
  BUF dst;
  uint n;
  uint rank;
  uint value_lo;
  uint value_hi;
  uint shape[6];
  int strides[6];
} p;

void main() {
  uint i = flat_invocation(LOCAL_SIZE);
  if (i >= p.n) return;
  uint shape[6] = p.shape;
  int st[6] = p.strides;
  p.dst.v[strided_offset(i, p.rank, shape, st)] = VALUE;
}
