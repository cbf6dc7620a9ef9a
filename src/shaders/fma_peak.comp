// mma_peak's fp32 row: how fast the device's fp32 units multiply-add when nothing else runs (the
// ceiling of the fp32 tiled GEMM and of the register-tiled attention kernels). Every invocation
// repeats `iters` rounds of 64 independent multiply-adds (16 vec4 accumulators, as many as the
// GEMM's 8 x 8 micro-tile holds) on values in registers, then stores their sum so that the work
// stays live.
#version 460
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
layout(local_size_x = 256) in;

layout(push_constant, std430) uniform Push {
  F32Buf src;  // [2]: the multiplier and the addend
  F32Buf dst;  // [invocations]
  uint iters;
} p;

void main() {
  const float x = p.src.v[0], y = p.src.v[1];
  vec4 acc[16];
  [[unroll]] for (uint i = 0; i < 16u; ++i) acc[i] = vec4(float(gl_LocalInvocationIndex + i));
  for (uint it = 0; it < p.iters; ++it)
    [[unroll]] for (uint i = 0; i < 16u; ++i) acc[i] = fma(acc[i], vec4(x), vec4(y));
  vec4 sum = vec4(0.0);
  [[unroll]] for (uint i = 0; i < 16u; ++i) sum += acc[i];
  p.dst.v[gl_GlobalInvocationID.x] = sum.x + sum.y + sum.z + sum.w;
}
