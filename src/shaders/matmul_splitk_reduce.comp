// The second pass of a split-K GEMM (src/ops/matmul_kernels.cpp): out(m, n) = alpha * sum_s
// partial[s](m, n) + beta * out(m, n) + bias(m, n), the S partial products summed in increasing s
// by one thread per output element, so results are deterministic. The partials are read eight at
// a time before they are added (in the same order), so that the loads are in flight together
// instead of one round trip per partial.
#version 460
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

layout(push_constant, std430) uniform Push {
  F32Buf partial;  // [S, M, N] contiguous
  F32Buf c;        // c(m, n) at m * c_rs + n * c_cs
  uint64_t bias;   // 0 when there is no bias
  uint M, N, S;
  uint c_rs, c_cs;
  uint bias_rs, bias_cs;
  float alpha, beta;
} p;

void main() {
  const uint i = flat_invocation(LOCAL_SIZE);
  if (i >= p.M * p.N) return;
  const uint m = i / p.N, n = i % p.N;
  const uint mn = p.M * p.N;
  float sum = 0.0;
  uint s = 0;
  for (; s + 8u <= p.S; s += 8u) {
    float x[8];
    [[unroll]] for (uint e = 0; e < 8u; ++e) x[e] = p.partial.v[(s + e) * mn + i];
    [[unroll]] for (uint e = 0; e < 8u; ++e) sum += x[e];
  }
  for (; s < p.S; ++s) sum += p.partial.v[s * mn + i];
  float v = p.alpha * sum;
  const uint ci = m * p.c_rs + n * p.c_cs;
  if (p.beta != 0.0) v += p.beta * p.c.v[ci];
  if (p.bias != 0) v += F32Buf(p.bias).v[m * p.bias_rs + n * p.bias_cs];
  p.c.v[ci] = v;
}
