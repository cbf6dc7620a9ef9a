// The push-constant block shared by the GEMM kernels (matmul_tiled, matmul_skinny); it mirrors
// GemmPush in src/ops/matmul.cpp. One batch entry z of the problem is
//   C[z](m, n) = alpha * sum_k opA[z](m, k) * opB[z](k, n) + beta * C[z](m, n) + bias(m, n)
// where opA(m, k) is a[z*sa + m*lda + k] (or a[z*sa + k*lda + m] when TRANS_A), opB(k, n) is
// b[z*sb + k*ldb + n] (or b[z*sb + n*ldb + k] when TRANS_B), C(m, n) is c[z*sc + m*c_rs + n*c_cs]
// and bias(m, n) is bias[m*bias_rs + n*bias_cs] (the host zeroes one of the two strides).
// A zero batch stride shares an operand across the batch. With beta == 0, C is never read.
layout(push_constant, std430) uniform Push {
  F32Buf a;
  F32Buf b;
  F32Buf c;
  uint64_t bias;  // 0 when there is no bias
  uint M, N, K;
  uint lda, ldb;
  uint c_rs, c_cs;
  uint sa, sb, sc;
  uint bias_rs, bias_cs;
  float alpha, beta;
#ifdef MATMUL_PUSH_EXTRA
  MATMUL_PUSH_EXTRA  // fields of the includer's own, after GemmPush's (matmul_skinny_f16)
#endif
} p;

// The epilogue's inputs besides the sum, for output (m, n) of batch entry z: C's value before the
// product (read only with beta != 0) and the bias (only where there is one), else 0.
uint output_index(uint z, uint m, uint n) { return z * p.sc + m * p.c_rs + n * p.c_cs; }
float output_old(uint z, uint m, uint n) {
  return p.beta != 0.0 ? p.c.v[output_index(z, m, n)] : 0.0;
}
float output_bias(uint m, uint n) {
  return p.bias != 0 ? F32Buf(p.bias).v[m * p.bias_rs + n * p.bias_cs] : 0.0;
}

// The epilogue with those inputs already read (a kernel may read them early, to take their latency
// out of its end). Returns the value stored.
float store_output_with(uint z, uint m, uint n, VACC acc, float old, float bias) {
  // With VKF_PRECISE the whole epilogue runs in double and rounds once.
  VACC v = VACC(p.alpha) * acc;
  if (p.beta != 0.0) v += VACC(p.beta) * VACC(old);
  if (p.bias != 0) v += VACC(bias);
  const float stored = float(v);
  p.c.v[output_index(z, m, n)] = stored;
  return stored;
}

// The epilogue every GEMM kernel ends with, for one in-range output element.
// Returns the value stored.
float store_output(uint z, uint m, uint n, VACC acc) {
  return store_output_with(z, m, n, acc, output_old(z, m, n), output_bias(m, n));
}
