// 16-bit floating types: IEEE half (f16) and bfloat16 (bf16), stored as raw bits.
// Conversions from float round to nearest even; NaN stays NaN. Usable on host and device.
#pragma once
#include <cstdint>
#include <cstring>
#if defined(__F16C__) && !defined(__CUDACC__)
#include <immintrin.h>  // F16C: hardware float<->half (x86-64-v3 has it)
#define MINIDL_HAS_F16C 1
#endif

#if defined(__CUDACC__)
#define MINIDL_HD __host__ __device__
#else
#define MINIDL_HD
#endif

namespace minidl {

namespace detail {
MINIDL_HD inline uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
MINIDL_HD inline float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
}  // namespace detail

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  MINIDL_HD BFloat16(float f) : bits(from_float(f)) {}
  MINIDL_HD operator float() const { return detail::bits_f32(uint32_t(bits) << 16); }
  MINIDL_HD static uint16_t from_float(float f) {
    // Branch-free (a select), so that loops converting arrays vectorise.
    const uint32_t u = detail::f32_bits(f);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (u >> 16) | 0x40u;
    return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  }
  MINIDL_HD static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

struct Half {
  uint16_t bits = 0;
  Half() = default;
  MINIDL_HD Half(float f) : bits(from_float(f)) {}
  MINIDL_HD operator float() const { return to_float(bits); }
  MINIDL_HD static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
  // Round-to-nearest-even float -> half, handling subnormals, overflow to inf and NaN.
  MINIDL_HD static uint16_t from_float(float f) {
#ifdef MINIDL_HAS_F16C
    return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#endif
    uint32_t x = detail::f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
    if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow (>= 65520) -> inf
    if (ax < 0x38800000u) {                                  // result is subnormal or zero
      // value = ax as float; half subnormal unit = 2^-24. Add magic to round at that unit.
      float v = detail::bits_f32(ax) + 0.5f;  // 0.5 = 2^-1: ulp(0.5) = 2^-24
      return uint16_t(sign | (detail::f32_bits(v) - 0x3f000000u));
    }
    uint32_t mant_odd = (ax >> 13) & 1u;
    ax += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
    return uint16_t(sign | (ax >> 13));
  }
  MINIDL_HD static float to_float(uint16_t h) {
#ifdef MINIDL_HAS_F16C
    return _cvtsh_ss(h);
#endif
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return detail::bits_f32(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
      float v = float(mant) * (1.0f / 16777216.0f);  // mant * 2^-24
      return sign ? -v : v;
    }
    return detail::bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
  }
};

}  // namespace minidl
