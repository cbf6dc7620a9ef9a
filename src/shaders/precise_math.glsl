// Accurate exp, log and 1/sqrt for the fp32 parity path. Vulkan lets the built-ins be several ulp
// off (lavapipe's exp is up to ~7 ulp inside softmax), which is more than PyTorch's fp32 error and
// so breaks the parity contract. Shaders marked `//!precise` are also built as `<name>_precise`
// with VKF_PRECISE=1; on devices with shaderFloat64 those variants run (unless VKF_FAST_MATH=1)
// and evaluate these functions in double, giving fp32 results within about half an ulp.
// Without VKF_PRECISE they are the built-ins.
#if VKF_PRECISE
#extension GL_EXT_shader_explicit_arithmetic_types_float64 : require
// Accumulator types of sums (matmul): double, so a dot product is rounded once at the end.
#define VACC double
#define VACC4 dvec4
#define VACC2 dvec2

// exp in double for |x| <= 709 (callers clamp the fp32 range first).
double dexp(double x) {
  const double n = floor(x * 1.4426950408889634LF + 0.5LF);
  // r = x - n*ln2 with ln2 split so the product is exact for |n| < 2^20.
  const double r = (x - n * 0.6931471803691238LF) - n * 1.9082149292705877e-10LF;
  // Taylor series of exp on |r| <= 0.35: the 13th term is below 2e-16.
  double p = 1.0LF / 479001600.0LF;  // 1/12!
  p = p * r + 1.0LF / 39916800.0LF;
  p = p * r + 1.0LF / 3628800.0LF;
  p = p * r + 1.0LF / 362880.0LF;
  p = p * r + 1.0LF / 40320.0LF;
  p = p * r + 1.0LF / 5040.0LF;
  p = p * r + 1.0LF / 720.0LF;
  p = p * r + 1.0LF / 120.0LF;
  p = p * r + 1.0LF / 24.0LF;
  p = p * r + 1.0LF / 6.0LF;
  p = p * r + 0.5LF;
  p = p * r + 1.0LF;
  p = p * r + 1.0LF;
  return ldexp(p, int(n));
}

float vexp(float xf) {
  if (isnan(xf)) return xf;
  if (xf < -104.0) return 0.0;
  if (xf > 88.8) return uintBitsToFloat(0x7f800000u);
  return float(dexp(double(xf)));
}

float vtanh(float xf) {
  if (isnan(xf)) return xf;
  const float a = abs(xf);
  if (a < 1e-4) return xf;  // tanh(x) = x (1 - x^2/3 ...): the correction is below half an ulp
  if (a > 10.0) return sign(xf);
  const double e = dexp(-2.0LF * double(a));
  const float t = float((1.0LF - e) / (1.0LF + e));
  return xf < 0.0 ? -t : t;
}

// log of a positive, finite double.
double dlog(double x) {
  int e;
  double m = frexp(x, e);  // m in [0.5, 1)
  if (m < 0.70710678118654752LF) {
    m *= 2.0LF;
    e -= 1;
  }
  // log(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.172: odd series to s^21.
  const double s = (m - 1.0LF) / (m + 1.0LF);
  const double s2 = s * s;
  double t = 1.0LF / 21.0LF;
  t = t * s2 + 1.0LF / 19.0LF;
  t = t * s2 + 1.0LF / 17.0LF;
  t = t * s2 + 1.0LF / 15.0LF;
  t = t * s2 + 1.0LF / 13.0LF;
  t = t * s2 + 1.0LF / 11.0LF;
  t = t * s2 + 1.0LF / 9.0LF;
  t = t * s2 + 1.0LF / 7.0LF;
  t = t * s2 + 1.0LF / 5.0LF;
  t = t * s2 + 1.0LF / 3.0LF;
  t = t * s2 + 1.0LF;
  return 2.0LF * s * t + double(e) * 0.6931471805599453LF;
}

float vlog(float xf) {
  if (isnan(xf) || xf < 0.0) return uintBitsToFloat(0x7fc00000u);
  if (xf == 0.0) return uintBitsToFloat(0xff800000u);
  if (isinf(xf)) return xf;
  return float(dlog(double(xf)));
}

float vrsqrt(float xf) { return float(1.0LF / sqrt(double(xf))); }
float vsqrt(float xf) { return float(sqrt(double(xf))); }

#else
#define VACC float
#define VACC4 vec4
#define VACC2 vec2
float vexp(float x) { return exp(x); }
// tanh without the driver's (which may lose relative accuracy near 0 or overflow).
float vtanh(float x) {
  const float ax = abs(x);
  float r;
  if (ax < 0.25) {
    // Taylor series to x^11; the first omitted term is below 3e-11 at |x| = 0.25.
    const float x2 = x * x;
    r = ax * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0 +
            x2 * (62.0 / 2835.0 + x2 * (-1382.0 / 155925.0))))));
  } else {
    // tanh rounds to 1 in f32 well before |x| = 10; clamping keeps exp finite.
    r = 1.0 - 2.0 / (exp(2.0 * min(ax, 10.0)) + 1.0);
  }
  return x < 0.0 ? -r : r;
}
float vlog(float x) { return log(x); }
float vrsqrt(float x) { return inversesqrt(x); }
float vsqrt(float x) { return sqrt(x); }
#endif
