// fma_exact(a, b, c): a * b + c rounded once, to nearest, on any Vulkan device. GLSL's fma() may
// be evaluated as a separate multiply and add (Vulkan allows it; lavapipe does), but the
// optimizers must fuse exactly where torch's kernels do, so it is built here from error-free
// transformations that only need what Vulkan guarantees, correctly rounded +, -, * and `precise`:
// Dekker's exact product, Knuth's TwoSum, and a final sum whose inner part is rounded to odd
// (Boldo & Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using
// rounding to odd", IEEE TC 2008). Exact unless a product or sum overflows or underflows into
// subnormals (then it is within an ulp or so); non-finite results, and inputs beyond 1e30 (where
// the split would overflow), take the plain expression.

// a * b = hi + lo exactly (Veltkamp split at 2^12 + 1 for 24-bit significands).
void exact_product(float a, float b, out float hi, out float lo) {
  precise float p = a * b;
  precise float ca = 4097.0 * a;
  precise float a_hi = ca - (ca - a);
  precise float a_lo = a - a_hi;
  precise float cb = 4097.0 * b;
  precise float b_hi = cb - (cb - b);
  precise float b_lo = b - b_hi;
  precise float err = ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo;
  hi = p;
  lo = err;
}

// a + b = s + e exactly.
void exact_sum(float a, float b, out float s, out float e) {
  precise float sum = a + b;
  precise float b_virtual = sum - a;
  precise float err = (a - (sum - b_virtual)) + (b - b_virtual);
  s = sum;
  e = err;
}

float fma_exact(float a, float b, float c) {
  precise float plain = a * b + c;
  if (isinf(plain) || isnan(plain) || max(abs(a), abs(b)) > 1.0e30) return plain;
  float p_hi, p_lo, s_hi, s_lo, v, v_err;
  exact_product(a, b, p_hi, p_lo);
  exact_sum(c, p_hi, s_hi, s_lo);
  // v = s_lo + p_lo rounded to odd: round to nearest, then, if that was inexact and landed on an
  // even significand, step one ulp towards the exact value (to the odd neighbour).
  exact_sum(s_lo, p_lo, v, v_err);
  uint bits = floatBitsToUint(v);
  if (v_err != 0.0 && (bits & 1u) == 0u) bits = (v_err > 0.0) == (v > 0.0) ? bits + 1u : bits - 1u;
  precise float result = s_hi + uintBitsToFloat(bits);
  return result;
}
