// Shared helpers for the CPU benchmarks: timing (median of repetitions, alternating blocks of
// the two implementations), argument parsing, deterministic data and error metrics.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace bench {

inline double now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Times each function in `fns` (one call = one sample) in `rounds` rounds; in each round every
// function runs a block of `block` timed calls after one untimed warm-up call, with a short
// pause between blocks so that spinning worker threads of the previous library go idle.
// Returns the median seconds per call for each function.
inline std::vector<double> time_alternating(const std::vector<std::function<void()>>& fns,
                                            int rounds, int block) {
  std::vector<std::vector<double>> samples(fns.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t f = 0; f < fns.size(); ++f) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      fns[f]();  // warm-up: caches, page faults, thread pools
      for (int i = 0; i < block; ++i) {
        double t0 = now_s();
        fns[f]();
        samples[f].push_back(now_s() - t0);
      }
    }
  std::vector<double> med;
  for (auto& s : samples) med.push_back(median(s));
  return med;
}

// Calls per block so that one block takes about `target_s` (estimated from one call).
inline int block_size(const std::function<void()>& fn, double target_s, int lo, int hi) {
  fn();
  double t0 = now_s();
  fn();
  double dt = std::max(now_s() - t0, 1e-7);
  return std::clamp(int(target_s / dt), lo, hi);
}

inline std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// max |a - b| / max |b|: a normwise relative error that is meaningful around zeros.
inline double max_rel_err(const float* a, const float* b, size_t n) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    ref = std::max(ref, std::abs(double(b[i])));
  }
  return ref > 0 ? diff / ref : diff;
}

// "--name value" from argv, or the default.
inline int int_arg(int argc, char** argv, const char* name, int def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  return def;
}
inline std::string str_arg(int argc, char** argv, const char* name, const std::string& def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return def;
}
inline bool flag_arg(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return true;
  return false;
}

}  // namespace bench
