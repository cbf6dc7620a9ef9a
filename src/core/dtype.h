// Element types of tensors and their host-side conversions. f16 and bf16 are stored as 16-bit
// patterns; conversions from f32 round to nearest even (as torch does), keeping NaN and infinity.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace vkf {

enum class DType : uint8_t { F32, F16, BF16, I32, I64 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
bool is_floating(DType t);

uint16_t f32_to_f16_bits(float f);
float f16_bits_to_f32(uint16_t h);
uint16_t f32_to_bf16_bits(float f);
float bf16_bits_to_f32(uint16_t b);

}  // namespace vkf
