// CPU kernels: uniform, normal, randint, bernoulli. Each reserves its counters once and fills
// element i from the Philox stream as a function of i only (mapping in tensor/random.h), so
// the result does not depend on the thread count. `out` is contiguous.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/dispatch.h"
#include "tensor/random.h"

namespace minidl::cpu {
namespace {

constexpr int64_t kRandomGrain = 8192;  // Philox is ~10 rounds per block: parallelise early

// Converts a computed value to the element type (f16/bf16 through float).
template <typename T, typename V>
inline T to_elem(V v) {
  if constexpr (is_reduced_float_v<T>)
    return T(float(v));
  else
    return static_cast<T>(v);
}

// Mantissa digits of a floating type (the random bits a uniform in [0,1) can hold exactly).
template <typename T>
constexpr int mantissa_digits() {
  if constexpr (std::is_same_v<T, Half>)
    return 11;
  else if constexpr (std::is_same_v<T, BFloat16>)
    return 8;
  else
    return 24;
}

// Blocks b0 .. b0+kGroup-1 of stream s, the kGroup counters side by side so that the ten
// Philox rounds run as vector multiplies (the same words as PhiloxStream::block, bit for bit).
constexpr int64_t kGroup = 16;
void philox_group(const PhiloxStream& s, uint64_t b0, Philox4x32* out) {
  uint32_t c0[kGroup], c1[kGroup], c2[kGroup], c3[kGroup];
  for (int64_t g = 0; g < kGroup; ++g) {
    const uint64_t c = s.offset + b0 + uint64_t(g);
    c0[g] = uint32_t(c);
    c1[g] = uint32_t(c >> 32);
    c2[g] = c3[g] = 0;
  }
  uint32_t k0 = uint32_t(s.seed), k1 = uint32_t(s.seed >> 32);
#pragma GCC unroll 1
  for (int r = 0; r < 10; ++r) {
#pragma GCC unroll 1
    for (int64_t g = 0; g < kGroup; ++g) philox_round(c0[g], c1[g], c2[g], c3[g], k0, k1);
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  for (int64_t g = 0; g < kGroup; ++g) out[g] = {{c0[g], c1[g], c2[g], c3[g]}};
}

// Fills o[0, numel) block by block: f(block(b), vals) computes the EPB values of elements
// [b*EPB, (b+1)*EPB) (EPB = 4 for 32-bit and normal draws, 2 for 64-bit draws); chunk edges
// store only the values they own. Blocks are generated kGroup at a time.
template <int EPB, typename T, typename F>
void fill_from_blocks(Tensor& out, const PhiloxStream& s, F f) {
  T* o = static_cast<T*>(out.data_ptr());
  const int64_t n = out.numel();
  auto run = [&](int64_t begin, int64_t end) {
    Philox4x32 blocks[kGroup];
    T vals[EPB];
    int64_t i = begin;
    while (i < end) {
      const int64_t b0 = i / EPB;
      philox_group(s, uint64_t(b0), blocks);
      for (int64_t g = 0; g < kGroup && i < end; ++g) {
        const int64_t b = b0 + g;
        f(blocks[g], vals);
        const int64_t stop = std::min(end, (b + 1) * EPB);
        for (; i < stop; ++i) o[i] = vals[i - b * EPB];
      }
    }
  };
  if (n < 2 * kRandomGrain)
    run(0, n);
  else
    parallel_for(n, kRandomGrain, run);
}

// a + (b - a) * u, u uniform in [0, 1).
void uniform_kernel(Tensor& out, double a, double b, Generator& gen) {
  const uint64_t n = uint64_t(out.numel());
  dispatch_floating(out.dtype(), "uniform", [&]<typename T>() {
    if constexpr (std::is_same_v<T, double>) {
      const PhiloxStream s = gen.reserve(PhiloxStream::blocks64(n));
      const double range = b - a;
      fill_from_blocks<2, double>(out, s, [=](const Philox4x32& r, double* v) {
        for (unsigned k = 0; k < 2; ++k)
          v[k] = std::fma(PhiloxStream::to_unit_double(PhiloxStream::lane64(r, k)), range, a);
      });
    } else {
      const PhiloxStream s = gen.reserve(PhiloxStream::blocks32(n));
      const float fa = float(a), frange = float(b - a);
      constexpr int digits = mantissa_digits<T>();
      fill_from_blocks<4, T>(out, s, [=](const Philox4x32& r, T* v) {
        for (unsigned k = 0; k < 4; ++k)
          v[k] = to_elem<T>(std::fma(PhiloxStream::to_unit_float(r.v[k], digits), frange, fa));
      });
    }
  });
}

// mean a, std b (Box-Muller in double: 2 pairs per block).
void normal_kernel(Tensor& out, double a, double b, Generator& gen) {
  const uint64_t n = uint64_t(out.numel());
  dispatch_floating(out.dtype(), "normal", [&]<typename T>() {
    const PhiloxStream s = gen.reserve(PhiloxStream::blocks32(n));
    fill_from_blocks<4, T>(out, s, [=](const Philox4x32& r, T* v) {
      for (unsigned k = 0; k < 2; ++k) {
        double z0, z1;
        PhiloxStream::box_muller(PhiloxStream::lane64(r, k), z0, z1);
        v[2 * k] = to_elem<T>(std::fma(z0, b, a));
        v[2 * k + 1] = to_elem<T>(std::fma(z1, b, a));
      }
    });
  });
}

// Integers in [a, b) (the frontend guarantees a < b, both exact in double).
void randint_kernel(Tensor& out, double a, double b, Generator& gen) {
  const uint64_t n = uint64_t(out.numel());
  const int64_t low = int64_t(a);
  const uint64_t range = uint64_t(int64_t(b) - low);
  dispatch_all(out.dtype(), "randint", [&]<typename T>() {
    if (range <= (uint64_t(1) << 32)) {
      const PhiloxStream s = gen.reserve(PhiloxStream::blocks32(n));
      fill_from_blocks<4, T>(out, s, [=](const Philox4x32& r, T* v) {
        for (unsigned k = 0; k < 4; ++k) v[k] = to_elem<T>(low + int64_t(uint64_t(r.v[k]) % range));
      });
    } else {
      const PhiloxStream s = gen.reserve(PhiloxStream::blocks64(n));
      fill_from_blocks<2, T>(out, s, [=](const Philox4x32& r, T* v) {
        for (unsigned k = 0; k < 2; ++k)
          v[k] = to_elem<T>(low + int64_t(PhiloxStream::lane64(r, k) % range));
      });
    }
  });
}

// b where u < a (u = word * 2^-32), else 0.
void bernoulli_kernel(Tensor& out, double a, double b, Generator& gen) {
  const uint64_t n = uint64_t(out.numel());
  dispatch_all(out.dtype(), "bernoulli", [&]<typename T>() {
    const PhiloxStream s = gen.reserve(PhiloxStream::blocks32(n));
    const T one = to_elem<T>(b);
    const T zero = to_elem<T>(0.0);
    fill_from_blocks<4, T>(out, s, [=](const Philox4x32& r, T* v) {
      for (unsigned k = 0; k < 4; ++k)
        v[k] = double(r.v[k]) * (1.0 / 4294967296.0) < a ? one : zero;
    });
  });
}

}  // namespace

void register_random_kernels() {
  register_kernel<Op::uniform>(DeviceType::cpu, uniform_kernel);
  register_kernel<Op::normal>(DeviceType::cpu, normal_kernel);
  register_kernel<Op::randint>(DeviceType::cpu, randint_kernel);
  register_kernel<Op::bernoulli>(DeviceType::cpu, bernoulli_kernel);
}

}  // namespace minidl::cpu
