// A matrix's transpose, contiguous: dst[z][c][r] = src(z, r, c), where element (z, r, c) of the
// source is at float z * bs + r * ld + c (rows contiguous). Used to hand the fp32 tiled GEMM its
// operands in the layout it reads fastest (ops/matmul_relayout.h). 32 x 32 tiles pass through
// shared memory so that both the reads (along a source row) and the writes (along a destination
// row) are coalesced; the padding column keeps the transposing reads free of bank conflicts.
// The f16 variant writes each value rounded to f16 (f16_round.glsl's f16_bits, the bits of
// convert.comp's f32 -> f16): the f16 operand copy of a tensor-core product, made in the
// kernel's faster layout at the cost of the plain conversion.
// The f16_pairs variant (for an even number of source rows R) takes 64 x 64 tiles and writes two
// adjacent halves as one 32-bit word, so that a subgroup writes 128 contiguous bytes of a
// destination row instead of 64 (H200: 2.6 TB/s with 16-bit stores); the same bits.
// Grid: x = column tiles, y = row tiles (of 32, or 64 for f16_pairs), z = batch entries.
//!variant f16 -DTO_F16=1
//!variant f16_pairs -DTO_F16=1 -DPAIRS=1
#version 460
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "f16_round.glsl"
layout(local_size_x = 32, local_size_y = 8) in;

layout(push_constant, std430) uniform Push {
  F32Buf src;
#if defined(PAIRS)
  U32Buf dst;  // pairs of halves; R is even
#elif defined(TO_F16)
  U16Buf dst;
#else
  F32Buf dst;
#endif
  uint rows;
  uint cols;
  uint ld;
  uint bs;
} p;

#if defined(PAIRS)
shared float tile[64][65];  // [source row][source column]

void main() {
  const uint c0 = gl_WorkGroupID.x * 64u, r0 = gl_WorkGroupID.y * 64u, z = gl_WorkGroupID.z;
  const uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;
  // Reads: each source row of the tile by the 32 invocations of a row, two columns apiece.
  [[unroll]] for (uint i = 0u; i < 64u; i += 8u) {
    const uint r = r0 + ly + i;
    [[unroll]] for (uint h = 0u; h < 2u; ++h) {
      const uint c = c0 + lx + 32u * h;
      if (r < p.rows && c < p.cols) tile[ly + i][lx + 32u * h] = p.src.v[z * p.bs + r * p.ld + c];
    }
  }
  barrier();
  // Writes: destination row c (a source column), invocation lx writing source rows r0 + 2 lx and
  // r0 + 2 lx + 1 as one word (both exist or neither: R and r0 are even).
  [[unroll]] for (uint i = 0u; i < 64u; i += 8u) {
    const uint c = c0 + ly + i, r = r0 + 2u * lx;
    if (r < p.rows && c < p.cols) {
      const uint lo = f16_bits(tile[2u * lx][ly + i]), hi = f16_bits(tile[2u * lx + 1u][ly + i]);
      p.dst.v[((z * p.cols + c) * p.rows + r) / 2u] = lo | (hi << 16);
    }
  }
}
#else
shared float tile[32][33];

void main() {
  const uint c0 = gl_WorkGroupID.x * 32u, r0 = gl_WorkGroupID.y * 32u, z = gl_WorkGroupID.z;
  const uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;
  [[unroll]] for (uint i = 0u; i < 32u; i += 8u) {
    const uint r = r0 + ly + i, c = c0 + lx;
    if (r < p.rows && c < p.cols) tile[ly + i][lx] = p.src.v[z * p.bs + r * p.ld + c];
  }
  barrier();
  [[unroll]] for (uint i = 0u; i < 32u; i += 8u) {
    const uint c = c0 + ly + i, r = r0 + lx;
    if (r < p.rows && c < p.cols) {
#if defined(TO_F16)
      p.dst.v[(z * p.cols + c) * p.rows + r] = uint16_t(f16_bits(tile[lx][ly + i]));
#else
      p.dst.v[(z * p.cols + c) * p.rows + r] = tile[lx][ly + i];
#endif
    }
  }
}
#endif
