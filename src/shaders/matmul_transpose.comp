// A matrix's transpose, contiguous: dst[z][c][r] = src(z, r, c), where element (z, r, c) of the
// source is at float z * bs + r * ld + c (rows contiguous). Used to hand the fp32 tiled GEMM its
// operands in the layout it reads fastest (ops/matmul_relayout.h). 32 x 32 tiles pass through
// shared memory so that both the reads (along a source row) and the writes (along a destination
// row) are coalesced; the padding column keeps the transposing reads free of bank conflicts.
// Grid: x = column tiles, y = row tiles, z = batch entries.
#version 460
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
layout(local_size_x = 32, local_size_y = 8) in;

layout(push_constant, std430) uniform Push {
  F32Buf src;
  F32Buf dst;
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
    if (r < p.rows && c < p.cols) p.dst.v[(z * p.cols + c) * p.rows + r] = tile[lx][ly + i];
  }
}
