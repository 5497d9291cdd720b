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

// Philox 4x32 multipliers and key increments (Salmon et al., SC'11).
inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;

// One Philox round on the counter words with round key (k0, k1), in place.
MINIDL_HD inline void philox_round(uint32_t& c0, uint32_t& c1, uint32_t& c2, uint32_t& c3,
                                   uint32_t k0, uint32_t k1) {
  const uint64_t p0 = uint64_t(kPhiloxM0) * c0;
  const uint64_t p1 = uint64_t(kPhiloxM1) * c2;
  const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
  c0 = n0;
  c1 = uint32_t(p1);
  c2 = n2;
  c3 = uint32_t(p0);
}

// One Philox 4x32-10 block: counter (4 words) and key (2 words) -> 4 random words.
MINIDL_HD inline Philox4x32 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                          uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    philox_round(c0, c1, c2, c3, k0, k1);
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  return {{c0, c1, c2, c3}};
}

// The stream of one draw. This mapping is the contract every backend reproduces bit for bit
// (element i depends only on (seed, offset, i), never on threads or launch geometry):
//  * Block b of the draw = philox4x32_10(counter = offset + b as 64 bits: c0 = low word,
//    c1 = high word, c2 = c3 = 0; key = seed: k0 = low word, k1 = high word).
//  * 32-bit draws (uniform f32/f16/bf16, bernoulli, randint with high - low <= 2^32):
//    element i uses word i%4 of block i/4 (`word(i)`); the draw reserves ceil(n/4) counters.
//  * 64-bit draws (uniform f64, randint with high - low > 2^32, randperm): element i uses
//    words 2(i%2) (high) and 2(i%2)+1 (low) of block i/2 (`word64(i)`); the draw reserves
//    ceil(n/2) counters.
//  * normal draws: block i/4 holds 4 normals: its 64-bit lane k = (i%4)/2 (words 2k, 2k+1)
//    feeds one Box-Muller pair (cos for even i, sin for odd i); the draw reserves ceil(n/4).
// Conversions (T = output dtype, a/b = the kernel's two parameters):
//  * uniform, d = mantissa digits of T (f32 24, f16 11, bf16 8): u = (w >> (32-d)) * 2^-d in
//    [0,1) (exact in T, so rand() never returns 1); value = T(fmaf(u, float(b-a), float(a))).
//    f64: u = (word64 >> 11) * 2^-53; value = fma(u, b-a, a).
//  * normal: z = Box-Muller in double: u1 = (hi + 1) * 2^-32 in (0, 1], u2 = lo * 2^-32,
//    r = sqrt(-2 log u1), z = r cos(2 pi u2) (even i) or r sin(2 pi u2) (odd i);
//    value = T(fma(z, b, a)) (computed in double; f16/bf16 round through float).
//  * bernoulli: value = (word(i) * 2^-32 < a) ? b : 0 (b = 1 for plain bernoulli; dropout masks
//    pass b = 1/(1-p)).
//  * randint: range = b - a; value = a + (word(i) % range) when range <= 2^32, else
//    a + (word64(i) % range).
//  * randperm(n) (CPU): Fisher-Yates, for j = n-1 down to 1 swap p[j] and p[word64(j) % (j+1)].
struct PhiloxStream {
  uint64_t seed;
  uint64_t offset;

  // Counters a draw of n elements reserves (32-bit and normal draws; 64-bit draws).
  MINIDL_HD static uint64_t blocks32(uint64_t n) { return (n + 3) / 4; }
  MINIDL_HD static uint64_t blocks64(uint64_t n) { return (n + 1) / 2; }

  MINIDL_HD Philox4x32 block(uint64_t b) const {
    uint64_t c = offset + b;
    return philox4x32_10(uint32_t(c), uint32_t(c >> 32), 0u, 0u, uint32_t(seed),
                         uint32_t(seed >> 32));
  }
  // Element i of a 32-bit draw / of a 64-bit draw.
  MINIDL_HD uint32_t word(uint64_t i) const { return block(i / 4).v[i % 4]; }
  MINIDL_HD uint64_t word64(uint64_t i) const { return lane64(block(i / 2), unsigned(i % 2)); }
  // Lane k (0 or 1) of a block as 64 bits: words 2k (high) and 2k+1 (low).
  MINIDL_HD static uint64_t lane64(const Philox4x32& r, unsigned k) {
    return (uint64_t(r.v[2 * k]) << 32) | r.v[2 * k + 1];
  }

  // Uniform in [0, 1) with `digits` random bits (24 for f32, 11 for f16, 8 for bf16).
  MINIDL_HD static float to_unit_float(uint32_t w, int digits = 24) {
    return float(w >> (32 - digits)) * (1.0f / float(uint32_t(1) << digits));
  }
  // Uniform double in [0, 1): 53 random bits from two words (hi, lo) = (word64 >> 11) * 2^-53.
  MINIDL_HD static double to_unit_double(uint32_t hi, uint32_t lo) {
    uint64_t bits = (uint64_t(hi) << 21) ^ (uint64_t(lo) >> 11);
    return double(bits & ((uint64_t(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
  }
  MINIDL_HD static double to_unit_double(uint64_t w) {
    return double(w >> 11) * (1.0 / 9007199254740992.0);
  }
  // Box-Muller pair (z0 = cos branch, z1 = sin branch) from a 64-bit lane, in double.
  MINIDL_HD static void box_muller(uint64_t w, double& z0, double& z1) {
    double u1 = (double(uint32_t(w >> 32)) + 1.0) * (1.0 / 4294967296.0);  // (0, 1]
    double u2 = double(uint32_t(w)) * (1.0 / 4294967296.0);                // [0, 1)
    double r = std::sqrt(-2.0 * std::log(u1));
    double theta = 6.283185307179586 * u2;
    z0 = r * std::cos(theta);
    z1 = r * std::sin(theta);
  }

  MINIDL_HD float uniform(uint64_t i, int digits = 24) const {
    return to_unit_float(word(i), digits);
  }
  MINIDL_HD double uniform_double(uint64_t i) const { return to_unit_double(word64(i)); }
  MINIDL_HD double normal(uint64_t i) const {
    double z0, z1;
    box_muller(lane64(block(i / 4), unsigned(i % 4) / 2), z0, z1);
    return i % 2 ? z1 : z0;
  }
};

// multinomial(w:[B,C], S, replacement) (CPU and CUDA run this same function per row, one
// thread per row on CUDA): the draw reserves blocks64(B*S) counters; sample k of row r uses
// u = uniform_double(r*S + k) (64-bit draw, 53 bits). All arithmetic is IEEE double adds,
// multiplies and compares in a fixed order (no FMA can form), so both backends agree exactly.
//  * with replacement: w is turned in place into its running sum cdf (left to right); the
//    sample is the first j with u*cdf[C-1] < cdf[j] (binary search; a zero weight never wins),
//    or, when rounding leaves none, the first j with cdf[j] == cdf[C-1].
//  * without replacement: sequentially for k = 0..S-1: total = sum of w (left to right),
//    t = u*total, the sample is the first j with w[j] > 0 and t < running sum through j
//    (else the last j with w[j] > 0); then w[j] = 0 (the chosen entry leaves the row).
// w holds non-negative finite weights with a positive sum (and, without replacement, at least
// S positive entries): the frontend checks before the kernel runs.
MINIDL_HD inline void multinomial_row(double* w, int64_t C, int64_t S, bool replacement,
                                      const PhiloxStream& s, uint64_t first, int64_t* out) {
  if (replacement) {
    double acc = 0;
    for (int64_t j = 0; j < C; ++j) w[j] = acc = acc + w[j];
    const double total = w[C - 1];
    for (int64_t k = 0; k < S; ++k) {
      const double t = s.uniform_double(first + uint64_t(k)) * total;
      const bool hit = t < total;  // false only when u*total rounded up to total
      int64_t lo = 0, hi = C - 1;  // first j with t < w[j] (hit) or w[j] >= total
      while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (hit ? t < w[mid] : w[mid] >= total)
          hi = mid;
        else
          lo = mid + 1;
      }
      out[k] = lo;
    }
    return;
  }
  for (int64_t k = 0; k < S; ++k) {
    double total = 0;
    for (int64_t j = 0; j < C; ++j) total = total + w[j];
    const double t = s.uniform_double(first + uint64_t(k)) * total;
    double acc = 0;
    int64_t pick = -1, last = 0;
    for (int64_t j = 0; j < C; ++j) {
      if (!(w[j] > 0)) continue;
      acc = acc + w[j];
      last = j;
      if (t < acc) {
        pick = j;
        break;
      }
    }
    if (pick < 0) pick = last;
    out[k] = pick;
    w[pick] = 0;
  }
}

// A seeded generator: (seed, offset). Thread-safe reservation of counter ranges; the offset
// counts Philox blocks (each draw advances it by the counters it reserves, see above).
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
