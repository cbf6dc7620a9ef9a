// The activations of HF configs (`hidden_act`) and their derivatives in fp32, selected by the
// spec constant ACT (values of vkf::ops::Activation). Written for accuracy over the whole range:
//   SiLU       x * sigmoid(x)                    sigmoid(t) = 1 / (1 + exp(-t)), safe at +-inf
//   GELU       x * Phi(x), Phi(x) = erfc(-x/sqrt2)/2, with an erfc that keeps relative accuracy in
//              the negative tail (torch's 0.5x(1+erf) loses it there to cancellation)
//   GELUTanh   0.5x(1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715x^3), evaluated as x * sigmoid(2u)
//              (the same function: 1 + tanh(u) = 2 sigmoid(2u)) to avoid GLSL tanh, whose
//              accuracy Vulkan leaves loose and which overflows on some drivers
//   ReLU       x < 0 ? 0 : x (NaN passes through, as in torch); gradient 1 where x > 0
//   QuickGELU  x * sigmoid(1.702x)
// GLSL has no erf. Ours: erf(z) = z * P(z^2) for |z| < 0.75, and erfc(z) = exp(-z^2) * Q(u) for
// z >= 0.75, where Q approximates erfcx(z) = exp(z^2) erfc(z) in u = 2.75 / (1 + z/2) - 1 in
// [-1, 1]. The coefficients are Chebyshev fits computed with mpmath (chebyfit, 50 digits) of
// erf(sqrt(s))/sqrt(s) on s in [0, 0.5625] (degree 6, error 3e-11) and of erfcx on that u range
// (degree 11, error 2e-10); both are far below fp32 rounding.
#define ACT_SILU 0u
#define ACT_GELU 1u
#define ACT_GELU_TANH 2u
#define ACT_RELU 3u
#define ACT_QUICK_GELU 4u
// The spec constant's id: 0 unless the including kernel uses 0 for something else.
#ifndef ACT_SPEC_ID
#define ACT_SPEC_ID 0
#endif
layout(constant_id = ACT_SPEC_ID) const uint ACT = ACT_SILU;

float sigmoid_f(float t) { return 1.0 / (1.0 + vexp(-t)); }

float erf_small(float z) {  // |z| < 0.75
  float s = z * z;
  float q = 9.470461782e-5;
  q = q * s - 8.356927920e-4;
  q = q * s + 5.216789490e-3;
  q = q * s - 2.686477180e-2;
  q = q * s + 1.128377864e-1;
  q = q * s - 3.761263845e-1;
  q = q * s + 1.128379167;
  return z * q;
}

// exp(-z*z) without the rounding error of z*z, which erfc would magnify by 2z^2 in the tail:
// z = hi + lo with hi on 12 significant bits, so hi*hi is exact.
float exp_neg_square(float z) {
  float hi = uintBitsToFloat(floatBitsToUint(z) & 0xfffff000u);
  float lo = z - hi;
  return vexp(-hi * hi) * vexp(-lo * (z + hi));
}

float erfc_large(float z) {  // z >= 0.75
  if (z >= 9.3) return 0.0;  // erfc(9.3) < 1e-39: below the normal fp32 range
  float u = 2.75 / (1.0 + 0.5 * z) - 1.0;
  float q = 5.637038746e-7;
  q = q * u - 2.766751941e-6;
  q = q * u - 4.815037391e-6;
  q = q * u + 3.340133513e-5;
  q = q * u + 4.470517052e-5;
  q = q * u - 3.436078183e-4;
  q = q * u - 8.651823013e-4;
  q = q * u + 3.268530658e-3;
  q = q * u + 2.701387552e-2;
  q = q * u + 9.521961213e-2;
  q = q * u + 2.272796781e-1;
  q = q * u + 1.552936555e-1;
  return exp_neg_square(z) * q;
}

float erfc_f(float z) {
  if (z >= 0.75) return erfc_large(z);
  if (z > -0.75) return 1.0 - erf_small(z);
  return 2.0 - erfc_large(-z);
}

const float kSqrtHalf = 0.70710678118654752;
const float kInvSqrt2Pi = 0.39894228040143268;
const float kSqrt2OverPi = 0.79788456080286536;
const float kGeluTanhCubic = 0.044715;
const float kQuickGeluScale = 1.702;

float act_value(float x) {
  if (ACT == ACT_SILU) return x / (1.0 + vexp(-x));
  if (ACT == ACT_GELU) return x * (0.5 * erfc_f(-x * kSqrtHalf));
  if (ACT == ACT_GELU_TANH) {
    float u = kSqrt2OverPi * (x + kGeluTanhCubic * x * x * x);
    return x / (1.0 + vexp(-2.0 * u));
  }
  if (ACT == ACT_RELU) return x < 0.0 ? 0.0 : x;
  return x / (1.0 + vexp(-kQuickGeluScale * x));
}

// d act / dx. Products with a vanishing sigmoid slope are skipped so that huge |x| gives the
// limit (0 or 1) rather than inf * 0.
float act_grad(float x) {
  if (ACT == ACT_SILU) {
    float s = sigmoid_f(x);
    float slope = s * (1.0 - s);
    return slope == 0.0 ? s : s + x * slope;
  }
  if (ACT == ACT_GELU) {
    float phi = 0.5 * erfc_f(-x * kSqrtHalf);
    return phi + x * (kInvSqrt2Pi * vexp(-0.5 * x * x));
  }
  if (ACT == ACT_GELU_TANH) {
    float u = kSqrt2OverPi * (x + kGeluTanhCubic * x * x * x);
    float du = kSqrt2OverPi * (1.0 + 3.0 * kGeluTanhCubic * x * x);
    float s = sigmoid_f(2.0 * u);
    float slope = s * (1.0 - s);
    return slope == 0.0 ? s : s + 2.0 * x * slope * du;
  }
  if (ACT == ACT_RELU) return x > 0.0 ? 1.0 : 0.0;
  float s = sigmoid_f(kQuickGeluScale * x);
  float slope = s * (1.0 - s);
  return slope == 0.0 ? s : s + kQuickGeluScale * x * slope;
}

// Value and derivative as VACC (double in precise builds), so gated products round once.
#if VKF_PRECISE
double dsigmoid(double t) {
  if (t < -700.0LF) return 0.0LF;
  if (t > 700.0LF) return 1.0LF;
  return 1.0LF / (1.0LF + dexp(-t));
}
// The sigmoid-based activations entirely in double; the erf form (GELU) and ReLU widen the float
// result (GELU's erfc is already accurate to about an ulp).
VACC act_value_acc(float xf) {
  const double x = double(xf);
  if (ACT == ACT_SILU) return x * dsigmoid(x);
  if (ACT == ACT_GELU_TANH) {
    const double u = double(kSqrt2OverPi) * (x + double(kGeluTanhCubic) * x * x * x);
    return x * dsigmoid(2.0LF * u);
  }
  if (ACT == ACT_QUICK_GELU) return x * dsigmoid(double(kQuickGeluScale) * x);
  return double(act_value(xf));
}
VACC act_grad_acc(float xf) {
  const double x = double(xf);
  if (ACT == ACT_SILU) {
    const double s = dsigmoid(x);
    return s + x * s * (1.0LF - s);
  }
  if (ACT == ACT_GELU_TANH) {
    const double u = double(kSqrt2OverPi) * (x + double(kGeluTanhCubic) * x * x * x);
    const double du = double(kSqrt2OverPi) * (1.0LF + 3.0LF * double(kGeluTanhCubic) * x * x);
    const double s = dsigmoid(2.0LF * u);
    return s + 2.0LF * x * s * (1.0LF - s) * du;
  }
  if (ACT == ACT_QUICK_GELU) {
    const double s = dsigmoid(double(kQuickGeluScale) * x);
    return s + double(kQuickGeluScale) * x * s * (1.0LF - s);
  }
  return double(act_grad(xf));
}
#else
VACC act_value_acc(float x) { return act_value(x); }
VACC act_grad_acc(float x) { return act_grad(x); }
#endif
