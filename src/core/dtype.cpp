// Host-side dtype helpers (see dtype.h). The GPU conversions live in src/shaders/convert.comp and
// follow the same rounding rules; tests compare the two against the compiler's _Float16.
#include "core/dtype.h"

#include <cstring>

#include "vk/error.h"

namespace vkf {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
  }
  return "?";
}

bool is_floating(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

static uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
static float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16_bits(float f) {
  const uint32_t x = bits_of(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xffu) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
  // Re-bias: f16 exponent = exp - 127 + 15.
  const int e = static_cast<int>(exp) - 112;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to infinity
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);  // underflows to zero even after rounding
    mant |= 0x800000u;                                // implicit bit
    const uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into the exponent
  return static_cast<uint16_t>(sign | half);
}

float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);  // mant * 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return float_of(sign | 0x7f800000u | (mant << 13));
  return float_of(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t f32_to_bf16_bits(float f) {
  const uint32_t x = bits_of(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

float bf16_bits_to_f32(uint16_t b) { return float_of(static_cast<uint32_t>(b) << 16); }

}  // namespace vkf
