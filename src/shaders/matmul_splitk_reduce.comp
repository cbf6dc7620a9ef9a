// The second pass of a split-K GEMM (src/ops/matmul_kernels.cpp): out(m, n) = alpha * sum_s
// partial[s](m, n) + beta * out(m, n) + bias(m, n), the S partial products summed in increasing s
// by one thread per output element, so results are deterministic.
#version 460
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
  float sum = 0.0;
  for (uint s = 0; s < p.S; ++s) sum += p.partial.v[s * p.M * p.N + i];
  float v = p.alpha * sum;
  const uint ci = m * p.c_rs + n * p.c_cs;
  if (p.beta != 0.0) v += p.beta * p.c.v[ci];
  if (p.bias != 0) v += F32Buf(p.bias).v[m * p.bias_rs + n * p.bias_cs];
  p.c.v[ci] = v;
}
