// A matrix's transpose, contiguous: dst[z][c][r] = src(z, r, c), where element (z, r, c) of the
// source is at float z * bs + r * ld + c (rows contiguous). Used to hand the fp32 tiled GEMM its
// operands in the layout it reads fastest (ops/matmul_relayout.h). 32 x 32 tiles pass through
// shared memory so that both the reads (along a source row) and the writes (along a destination
// row) are coalesced; the padding column keeps the transposing reads free of bank conflicts.
// The f16 variant writes each value rounded to f16 (f16_round.glsl's f16_bits, the bits of
// convert.comp's f32 -> f16): the f16 operand copy of a tensor-core product, made in the
// kernel's faster layout at the cost of the plain conversion.
// Grid: x = column tiles, y = row tiles, z = batch entries.
//!variant f16 -DTO_F16=1
#version 460
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "f16_round.glsl"
layout(local_size_x = 32, local_size_y = 8) in;

layout(push_constant, std430) uniform Push {
  F32Buf src;
#if defined(TO_F16)
  U16Buf dst;
#else
  F32Buf dst;
#endif
  uint rows;
  uint cols;
  uint ld;
  uint bs;
} p;

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
