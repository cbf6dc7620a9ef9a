// dst[view] = src[view] for views of rank <= 6 with arbitrary strides, by element width.
// Used for contiguous(), copy_() into slices, and slice backward.
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
#elif ELEM_BITS == 32
#define BUF U32Buf
#else
#define BUF U64Buf
#endif

layout(push_constant, std430) uniform Push {
  BUF src;
  BUF dst;
  uint n;
  uint rank;
  uint shape[6];
  int src_strides[6];
  int dst_strides[6];
} p;

void main() {
  uint i = flat_invocation(LOCAL_SIZE);
  if (i >= p.n) return;
  uint shape[6] = p.shape;
  int ss[6] = p.src_strides;
  int ds[6] = p.dst_strides;
  p.dst.v[strided_offset(i, p.rank, shape, ds)] = p.src.v[strided_offset(i, p.rank, shape, ss)];
}
