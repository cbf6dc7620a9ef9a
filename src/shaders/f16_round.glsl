// Rounding f32 values to IEEE binary16 for mixed-precision matrix products, exactly as
// f32_to_f16_bits in src/core/dtype.cpp: round to nearest even, overflow to +-infinity, f16
// subnormals kept, NaN stays NaN. Built from integer operations only, because Vulkan leaves the
// rounding mode of float conversions (and whether they flush subnormals or saturate on overflow)
// to the implementation; these give the same bits on every device, with or without shaderFloat16.

// The binary16 bit pattern of x.
uint f16_bits(float x) {
  const uint u = floatBitsToUint(x);
  const uint sign = (u >> 16) & 0x8000u;
  const uint a = u & 0x7fffffffu;
  if (a >= 0x38800000u && a < 0x477ff000u) {
    // The f16 normal range (2^-14 <= |x| < 65520): re-bias the exponent (127 -> 15) and round the
    // 13 dropped mantissa bits to nearest even; a carry may step into the next binade (or reach
    // 0x7c00, infinity, just below 65520 -- excluded by the range).
    return sign | ((a - 0x38000000u + 0x0fffu + ((a >> 13) & 1u)) >> 13);
  }
  if (a >= 0x7f800000u) return sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u);  // inf, NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // 65520 and above round to infinity
  if (a < 0x33000000u) return sign;             // below 2^-25 (f32 subnormals too): zero
  // An f16 subnormal (or, after rounding up, the smallest normal): a multiple of 2^-24.
  const uint mant = (a & 0x7fffffu) | 0x800000u;
  const uint shift = 126u - (a >> 23);  // 14..24
  uint half_bits = mant >> shift;
  const uint rem = mant & ((1u << shift) - 1u);
  const uint mid = 1u << (shift - 1u);
  if (rem > mid || (rem == mid && (half_bits & 1u) != 0u)) ++half_bits;
  return sign | half_bits;
}

// x rounded to the nearest f16 value (as f16_bits), returned as an f32.
float round_to_f16(float x) {
  const uint u = floatBitsToUint(x);
  const uint a = u & 0x7fffffffu;
  if (a >= 0x38800000u && a < 0x477ff000u) {
    // Round the mantissa to 10 bits in place; the exponent field is already right.
    return uintBitsToFloat((u & 0x80000000u) | ((a + 0x0fffu + ((a >> 13) & 1u)) & 0xffffe000u));
  }
  if (a >= 0x7f800000u) return x;
  const uint sign = u & 0x80000000u;
  if (a >= 0x477ff000u) return uintBitsToFloat(sign | 0x7f800000u);
  // f16 subnormals: (bits & 0x7fff) * 2^-24, exact in f32 (an integer below 2^11 times a power
  // of two whose product is an f32 normal).
  const float magnitude = float(f16_bits(x) & 0x7fffu) * 5.9604644775390625e-8;
  return uintBitsToFloat(sign | floatBitsToUint(magnitude));
}

// The f32 value of binary16 bits h (exact; f16 subnormals are f32 normals).
float f16_bits_to_float(uint h) {
  const uint sign = (h & 0x8000u) << 16;
  const uint exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0u)  // a multiple of 2^-24
    return uintBitsToFloat(sign | floatBitsToUint(float(mantissa) * 5.9604644775390625e-8));
  if (exponent == 31u) return uintBitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  return uintBitsToFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}
