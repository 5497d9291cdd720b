// Random numbers: Philox 4x32-10 (counter-based, Salmon et al. 2011) and Generator objects.
// Element i of a draw of n numbers is a pure function of (seed, offset, i), so CPU and CUDA
// kernels produce identical streams. Each draw advances the generator's offset by n.
#pragma once
#include <cmath>
#include <cstdint>
#include <mutex>

#include "tensor/half.h"  // MINIDL_HD

namespace minidl {

struct Philox4x32 {
  uint32_t v[4];
};

// One Philox 4x32-10 block: counter (4 words) and key (2 words) -> 4 random words.
MINIDL_HD inline Philox4x32 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                         uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = uint64_t(kM0) * c0;
    uint64_t p1 = uint64_t(kM1) * c2;
    uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  return {{c0, c1, c2, c3}};
}

// The stream: block b (64-bit) of a draw at `offset` uses counter (offset + b) with the
// 64-bit seed as key. uniform element i -> word i%4 of block i/4;
// normal element i -> Box-Muller on words 2(i%2), 2(i%2)+1 of block i/2.
struct PhiloxStream {
  uint64_t seed;
  uint64_t offset;

  MINIDL_HD Philox4x32 block(uint64_t b) const {
    uint64_t c = offset + b;
    return philox4x32_10(uint32_t(c), uint32_t(c >> 32), 0u, 0u, uint32_t(seed),
                         uint32_t(seed >> 32));
  }
  MINIDL_HD uint32_t word(uint64_t i) const { return block(i / 4).v[i % 4]; }
  // Uniform float in [0, 1): 24 random bits.
  MINIDL_HD static float to_unit_float(uint32_t w) { return float(w >> 8) * (1.0f / 16777216.0f); }
  // Uniform double in [0, 1): 53 random bits from two words.
  MINIDL_HD static double to_unit_double(uint32_t hi, uint32_t lo) {
    uint64_t bits = (uint64_t(hi) << 21) ^ (uint64_t(lo) >> 11);
    return double(bits & ((uint64_t(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
  }
  MINIDL_HD float uniform(uint64_t i) const { return to_unit_float(word(i)); }
  // Standard normal (Box-Muller, computed in double for accuracy).
  MINIDL_HD double normal(uint64_t i) const {
    Philox4x32 r = block(i / 2);
    uint32_t a = r.v[2 * (i % 2)], b = r.v[2 * (i % 2) + 1];
    double u1 = (double(a) + 1.0) * (1.0 / 4294967296.0);  // (0, 1]
    double u2 = double(b) * (1.0 / 4294967296.0);          // [0, 1)
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

// A seeded generator: (seed, offset). Thread-safe reservation of counter ranges.
class Generator {
 public:
  explicit Generator(uint64_t seed = 67280421310721ull) : seed_(seed) {}
  void manual_seed(uint64_t seed) {
    std::lock_guard<std::mutex> lock(mutex_);
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) {
    std::lock_guard<std::mutex> lock(mutex_);
    seed_ = seed;
    offset_ = offset;
  }
  // Reserves `n` counters and returns the stream to draw them from.
  PhiloxStream reserve(uint64_t n) {
    std::lock_guard<std::mutex> lock(mutex_);
    PhiloxStream s{seed_, offset_};
    offset_ += n;
    return s;
  }

 private:
  std::mutex mutex_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide default generator (used when no generator is passed).
Generator& default_generator();
// Seeds the default generator (torch.manual_seed).
void manual_seed(uint64_t seed);

}  // namespace minidl
