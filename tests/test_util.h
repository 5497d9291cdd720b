// Shared test helpers: deterministic random tensors (std::mt19937, independent of minidl's
// RNG), f64 views of tensors, non-contiguous copies, and closeness checks with messages.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "minidl.h"
#include "tensor/profiler.h"
#include "tensor/variants.h"

namespace testutil {
using namespace minidl;

// Contiguous CPU tensor of `dtype` from f64 values (row-major).
inline Tensor from_f64(const std::vector<double>& v, const Shape& shape, DType dtype = kFloat32) {
  REQUIRE(int64_t(v.size()) == shape_numel(shape));
  Tensor t = empty(shape, kFloat64);
  std::copy(v.begin(), v.end(), t.data_ptr<double>());
  return t.to(dtype);
}

// All elements as f64, row-major (any dtype, strides, device).
inline std::vector<double> to_f64(const Tensor& t) {
  return t.tolist<double>();
}

// Uniform values in [lo, hi) from a seeded mt19937 (integers for integral dtypes).
inline Tensor random_tensor(const Shape& shape, DType dtype = kFloat32, uint64_t seed = 0,
                            double lo = -2.0, double hi = 2.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(size_t(shape_numel(shape)));
  for (double& x : v) {
    x = dist(rng);
    if (is_integral(dtype, true)) x = std::floor(x);
    if (dtype == kBool) x = x > (lo + hi) / 2 ? 1 : 0;
    // make values exactly representable in the low-precision dtypes
    if (dtype == kFloat16) x = double(float(Half(float(x))));
    if (dtype == kBFloat16) x = double(float(BFloat16(float(x))));
  }
  return from_f64(v, shape, dtype);
}

// An f64 leaf that requires grad, values uniform in [lo, hi) (gradcheck inputs).
inline Tensor leaf(const Shape& shape, uint64_t seed, double lo = -1, double hi = 1) {
  Tensor x = random_tensor(shape, kFloat64, seed, lo, hi);
  x.requires_grad_();
  return x;
}

// The same values as `t` but in a non-contiguous layout (every other element of a buffer
// twice as wide in the last dim).
inline Tensor noncontiguous(const Tensor& t) {
  if (t.dim() == 0) return t;
  Shape wide = t.shape();
  wide.back() *= 2;
  Tensor buf = empty(wide, t.dtype(), t.device());
  buf.fill_(0);
  Tensor view = buf.slice(-1, 0, wide.back(), 2);
  view.copy_(t);
  REQUIRE((t.numel() <= 1 || t.size(-1) <= 1 || !view.is_contiguous()));
  return view;
}

// Multi-index <-> row-major linear index.
inline std::vector<int64_t> unravel(int64_t lin, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (int64_t d = int64_t(s.size()) - 1; d >= 0; --d) {
    idx[size_t(d)] = lin % s[size_t(d)];
    lin /= s[size_t(d)];
  }
  return idx;
}
inline int64_t ravel(const std::vector<int64_t>& idx, const Shape& s) {
  int64_t lin = 0;
  for (size_t d = 0; d < s.size(); ++d) lin = lin * s[d] + idx[d];
  return lin;
}

// Default tolerances per dtype (relative, absolute).
inline std::pair<double, double> tolerance(DType dt) {
  switch (dt) {
    case DType::f64:
      return {1e-10, 1e-12};
    case DType::f32:
      return {1e-5, 1e-6};
    case DType::f16:
      return {2e-3, 1e-3};
    case DType::bf16:
      return {1.6e-2, 1e-2};
    default:
      return {0, 0};
  }
}

// Checks |actual - expected| <= atol + rtol*|expected| elementwise (NaN equals NaN, inf
// must match exactly); reports the first mismatches with their flat index.
inline void check_close(const Tensor& actual, const std::vector<double>& expected, double rtol = -1,
                        double atol = -1) {
  if (rtol < 0) std::tie(rtol, atol) = tolerance(actual.dtype());
  std::vector<double> a = to_f64(actual);
  REQUIRE(a.size() == expected.size());
  int bad = 0;
  std::ostringstream msg;
  for (size_t i = 0; i < a.size(); ++i) {
    double x = a[i], y = expected[i];
    bool ok = (std::isnan(x) && std::isnan(y)) || x == y ||
              (std::isfinite(y) && std::abs(x - y) <= atol + rtol * std::abs(y));
    if (!ok && bad++ < 5) msg << " [" << i << "] got " << x << " expected " << y << ";";
  }
  INFO("dtype ", dtype_name(actual.dtype()), " shape ", actual.shape_str(), " mismatches ", bad,
       ":", msg.str());
  CHECK(bad == 0);
}

inline void check_close(const Tensor& actual, const Tensor& expected, double rtol = -1,
                        double atol = -1) {
  REQUIRE(actual.shape() == expected.shape());
  check_close(actual, to_f64(expected), rtol, atol);
}

// Same shape, dtype and bytes (CPU copies of device tensors; empty tensors are equal).
inline bool bitwise_equal(const minidl::Tensor& a, const minidl::Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  if (a.numel() == 0) return true;  // memcmp may not be given an empty tensor's null data
  minidl::Tensor x = a.cpu().contiguous(), y = b.cpu().contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), size_t(x.numel()) * x.element_size()) == 0;
}

// The largest |x| of t, at least 1e-30: a scale for tolerances relative to a tensor.
inline double largest_magnitude(const Tensor& t) {
  double m = 1e-30;
  for (double v : to_f64(t)) m = std::max(m, std::abs(v));
  return m;
}

// The kernel dispatches fn makes (the op profiler on for the call only, then as before).
template <typename Fn>
int64_t dispatches_of(Fn&& fn) {
  const bool before = profiler::enabled();
  profiler::enable(true);
  const int64_t d0 = profiler::dispatch_count();
  fn();
  const int64_t n = profiler::dispatch_count() - d0;
  profiler::enable(before);
  return n;
}

// MINIDL_UNFUSED for a scope (tensor/variants.h): the listed fused paths off from construction
// (the default constructor changes nothing), every fused path back on at the end.
struct ScopedUnfused {
  ScopedUnfused() = default;
  explicit ScopedUnfused(const std::string& list) { variants::set_unfused(list); }
  ~ScopedUnfused() { variants::set_unfused(""); }
  ScopedUnfused(const ScopedUnfused&) = delete;
  ScopedUnfused& operator=(const ScopedUnfused&) = delete;
};

}  // namespace testutil

// Runs autograd::gradcheck(f, inputs...) and reports the first mismatch on failure.
#define GRADCHECK(f, ...)                                    \
  do {                                                       \
    auto r_ = ::minidl::autograd::gradcheck(f, __VA_ARGS__); \
    CHECK_MESSAGE(r_.ok, r_.message);                        \
  } while (0)
