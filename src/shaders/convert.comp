// Converts a contiguous tensor between dtypes: f32, f16, bf16 (16-bit patterns), i32, i64.
// Float to 16-bit rounds to nearest even in integer arithmetic, so every device gives the same
// bits (the host's f32_to_f16_bits/f32_to_bf16_bits follow the same rules). Float to integer
// truncates toward zero, as torch's .to(int) does. The f32_f16_x8 variant (both buffers 16-byte
// aligned; the host's choice) converts eight elements per invocation with 16-byte loads and stores:
// it is how f16 operands of the tensor-core GEMM are made, so its bandwidth matters.
//!novariant_base
//!variant f32_f16 -DSRC_F32 -DDST_F16
//!variant f32_f16_x8 -DSRC_F32 -DDST_F16 -DX8
//!variant f32_bf16 -DSRC_F32 -DDST_BF16
//!variant f32_i32 -DSRC_F32 -DDST_I32
//!variant f32_i64 -DSRC_F32 -DDST_I64
//!variant f16_f32 -DSRC_F16 -DDST_F32
//!variant f16_bf16 -DSRC_F16 -DDST_BF16
//!variant f16_i32 -DSRC_F16 -DDST_I32
//!variant f16_i64 -DSRC_F16 -DDST_I64
//!variant bf16_f32 -DSRC_BF16 -DDST_F32
//!variant bf16_f16 -DSRC_BF16 -DDST_F16
//!variant bf16_i32 -DSRC_BF16 -DDST_I32
//!variant bf16_i64 -DSRC_BF16 -DDST_I64
//!variant i32_f32 -DSRC_I32 -DDST_F32
//!variant i32_f16 -DSRC_I32 -DDST_F16
//!variant i32_bf16 -DSRC_I32 -DDST_BF16
//!variant i32_i64 -DSRC_I32 -DDST_I64
//!variant i64_f32 -DSRC_I64 -DDST_F32
//!variant i64_f16 -DSRC_I64 -DDST_F16
//!variant i64_bf16 -DSRC_I64 -DDST_BF16
//!variant i64_i32 -DSRC_I64 -DDST_I32
#version 460
#include "common.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

#if defined(SRC_F32)
#define SRC_BUF U32Buf
#elif defined(SRC_F16) || defined(SRC_BF16)
#define SRC_BUF U16Buf
#elif defined(SRC_I32)
#define SRC_BUF I32Buf
#else
#define SRC_BUF I64Buf
#endif
#if defined(DST_F32)
#define DST_BUF U32Buf
#elif defined(DST_F16) || defined(DST_BF16)
#define DST_BUF U16Buf
#elif defined(DST_I32)
#define DST_BUF I32Buf
#else
#define DST_BUF I64Buf
#endif

layout(push_constant, std430) uniform Push {
  SRC_BUF src;
  DST_BUF dst;
  uint n;
} p;

float f16_to_f32(uint h) {
  uint sign = (h & 0x8000u) << 16;
  uint e = (h >> 10) & 0x1fu;
  uint m = h & 0x3ffu;
  if (e == 0u) {
    float v = float(m) * (1.0 / 16777216.0);
    return sign != 0u ? -v : v;
  }
  if (e == 31u) return uintBitsToFloat(sign | 0x7f800000u | (m << 13));
  return uintBitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
}

uint f32_to_f16(uint x) {
  uint sign = (x >> 16) & 0x8000u;
  uint e8 = (x >> 23) & 0xffu;
  uint mant = x & 0x7fffffu;
  if (e8 == 0xffu) return sign | 0x7c00u | (mant != 0u ? 0x200u : 0u);
  int e = int(e8) - 112;
  if (e >= 31) return sign | 0x7c00u;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000u;
    uint shift = uint(14 - e);
    uint half_ = mant >> shift;
    uint rem = mant & ((1u << shift) - 1u);
    uint mid = 1u << (shift - 1u);
    if (rem > mid || (rem == mid && (half_ & 1u) != 0u)) half_ += 1u;
    return sign | half_;
  }
  uint half_ = (uint(e) << 10) | (mant >> 13);
  uint rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half_ & 1u) != 0u)) half_ += 1u;
  return sign | half_;
}

uint f32_to_bf16(uint x) {
  if ((x & 0x7fffffffu) > 0x7f800000u) return (x >> 16) | 0x40u;
  return (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
}

#if defined(X8)
layout(buffer_reference, std430, buffer_reference_align = 16) buffer U4Buf { uvec4 v[]; };
void main() {
  const uint i = flat_invocation(LOCAL_SIZE);
  const uint first = 8u * i;
  if (first >= p.n) return;
  if (first + 8u <= p.n) {
    const uvec4 lo = U4Buf(uint64_t(p.src)).v[2u * i], hi = U4Buf(uint64_t(p.src)).v[2u * i + 1u];
    U4Buf(uint64_t(p.dst)).v[i] =
        uvec4(f32_to_f16(lo.x) | (f32_to_f16(lo.y) << 16), f32_to_f16(lo.z) | (f32_to_f16(lo.w) << 16),
              f32_to_f16(hi.x) | (f32_to_f16(hi.y) << 16), f32_to_f16(hi.z) | (f32_to_f16(hi.w) << 16));
    return;
  }
  for (uint e = first; e < p.n; ++e) p.dst.v[e] = uint16_t(f32_to_f16(p.src.v[e]));
}
#else
void main() {
  uint i = flat_invocation(LOCAL_SIZE);
  if (i >= p.n) return;
#if defined(SRC_F32)
  float f = uintBitsToFloat(p.src.v[i]);
#elif defined(SRC_F16)
  float f = f16_to_f32(uint(p.src.v[i]));
#elif defined(SRC_BF16)
  float f = uintBitsToFloat(uint(p.src.v[i]) << 16);
#elif defined(SRC_I32)
  int iv = p.src.v[i];
#else
  int64_t lv = p.src.v[i];
#endif

#if defined(DST_I32) || defined(DST_I64)
#if defined(SRC_I32)
  int64_t r = int64_t(iv);
#elif defined(SRC_I64)
  int64_t r = lv;
#else
  int64_t r = int64_t(f);
#endif
#if defined(DST_I32)
  p.dst.v[i] = int(r);
#else
  p.dst.v[i] = r;
#endif
#else
#if defined(SRC_I32)
  float f = float(iv);
#elif defined(SRC_I64)
  float f = float(lv);
#endif
#if defined(DST_F32)
  p.dst.v[i] = floatBitsToUint(f);
#elif defined(DST_F16)
  p.dst.v[i] = uint16_t(f32_to_f16(floatBitsToUint(f)));
#else
  p.dst.v[i] = uint16_t(f32_to_bf16(floatBitsToUint(f)));
#endif
#endif
}
#endif
