// dst[r, c] = src[r, c] for copies whose views are rows of contiguous elements: `rows` rows of
// `cols` elements, row r starting r * src_rs (r * dst_rs) elements in. The common copies
// (contiguous(), copy_() into slices, the column slices of a grouped product) have this form, and
// without copy_strided.comp's per-element index arithmetic over six dimensions they run at memory
// speed. The v4 variant moves 16-byte units of any element type (the host converts the counts).
//!novariant_base
//!variant b16 -DELEM_BITS=16
//!variant b32 -DELEM_BITS=32
//!variant b64 -DELEM_BITS=64
//!variant v4 -DELEM_BITS=128
#version 460
#include "common.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

#if ELEM_BITS == 16
#define BUF U16Buf
#elif ELEM_BITS == 32
#define BUF U32Buf
#elif ELEM_BITS == 64
#define BUF U64Buf
#else
layout(buffer_reference, std430, buffer_reference_align = 16) buffer UVec4Buf { uvec4 v[]; };
#define BUF UVec4Buf
#endif

layout(push_constant, std430) uniform Push {
  BUF src;
  BUF dst;
  uint rows, cols;      // in units (elements, or 16 bytes for v4)
  uint src_rs, dst_rs;  // row strides, in the same units
} p;

void main() {
  const uint i = flat_invocation(LOCAL_SIZE);
  if (i >= p.rows * p.cols) return;
  const uint r = i / p.cols, c = i - r * p.cols;
  p.dst.v[r * p.dst_rs + c] = p.src.v[r * p.src_rs + c];
}
