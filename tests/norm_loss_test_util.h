// Shared by the normalisation and loss tests (test_layer_norm.cpp, test_batch_norm.cpp,
// test_loss.cpp): their PyTorch golden file (tests/data/golden_norm_loss.json), the float dtypes,
// and a central-difference check of a backward kernel's gradient in f64.
#pragma once
#include <doctest/doctest.h>

#include <functional>
#include <vector>

#include "golden.h"

namespace norm_loss_test {
using namespace minidl;
using namespace testutil;

inline const json& golden() {
  return testutil::golden("golden_norm_loss.json");
}
inline Tensor jt(const json& o, DType dt) {
  return golden_tensor(o, dt);
}
inline std::vector<double> jv(const json& o) {
  return golden_values(o);
}

constexpr DType kFloatTypes[] = {kFloat32, kFloat64, kFloat16, kBFloat16};

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central differences of f at v (f64), compared with the analytical gradient (rtol 1e-5).
inline void check_fd(const std::vector<double>& v, const std::vector<double>& analytical,
                     const std::function<double(const std::vector<double>&)>& f,
                     double atol = 1e-6) {
  REQUIRE(v.size() == analytical.size());
  const double h = 1e-6;
  std::vector<double> num(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    std::vector<double> p = v, m = v;
    p[i] += h;
    m[i] -= h;
    num[i] = (f(p) - f(m)) / (2 * h);
  }
  check_close(from_f64(analytical, {int64_t(v.size())}, kFloat64), num, 1e-5, atol);
}

}  // namespace norm_loss_test
