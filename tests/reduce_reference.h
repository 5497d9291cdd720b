// Naive f64 references of the reductions (tests/test_reduce.cpp, test_reduce_dim.cpp): the
// elements of each output position, sum/mean/var/max/min/logsumexp/argmax over them, output
// shapes, every dim subset, input layouts, and a check of an op over all of them.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "test_util.h"

namespace reduce_reference {
using namespace minidl;
using namespace testutil;

inline const double kInf = std::numeric_limits<double>::infinity();
inline const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Groups the elements of a row-major tensor of shape `s` by their output position when
// reducing `dims` (sorted, normalised; empty = all). Each group is in increasing order of
// its position along the reduced dims.
inline std::vector<std::vector<double>> groups(const std::vector<double>& v, const Shape& s,
                                               const DimList& dims_in) {
  DimList dims = dims_in;
  if (dims.empty())
    for (int64_t d = 0; d < int64_t(s.size()); ++d) dims.push_back(d);
  Shape ks = s;
  for (int64_t d : dims) ks[size_t(d)] = 1;
  std::vector<std::vector<double>> g(size_t(shape_numel(ks)));
  std::vector<int64_t> idx(s.size(), 0);
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t o = 0;
    for (size_t d = 0; d < s.size(); ++d) o = o * ks[d] + (ks[d] == 1 ? 0 : idx[d]);
    g[size_t(o)].push_back(v[i]);
    for (int64_t d = int64_t(s.size()) - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < s[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
  return g;
}

using RefFn = std::function<double(const std::vector<double>&)>;

inline std::vector<double> ref_reduce(const Tensor& x, const DimList& dims, const RefFn& f) {
  std::vector<double> out;
  for (auto& g : groups(to_f64(x), x.shape(), dims)) out.push_back(f(g));
  return out;
}

inline double ref_sum(const std::vector<double>& g) {
  double s = 0;
  for (double v : g) s += v;
  return s;
}
inline double ref_mean(const std::vector<double>& g) {
  return ref_sum(g) / double(g.size());
}
inline double ref_var(const std::vector<double>& g, double correction) {
  double m = ref_mean(g), s = 0;
  for (double v : g) s += (v - m) * (v - m);
  return s / std::max(0.0, double(g.size()) - correction);
}
inline double ref_max(const std::vector<double>& g) {
  double m = -kInf;
  for (double v : g) m = (std::isnan(v) || v > m) && !std::isnan(m) ? v : m;
  return m;
}
inline double ref_min(const std::vector<double>& g) {
  double m = kInf;
  for (double v : g) m = (std::isnan(v) || v < m) && !std::isnan(m) ? v : m;
  return m;
}
inline double ref_lse(const std::vector<double>& g) {
  double m = ref_max(g);
  if (std::isinf(m)) return m;
  double s = 0;
  for (double v : g) s += std::exp(v - m);
  return m + std::log(s);
}
inline int64_t ref_argmax(const std::vector<double>& g, bool is_max) {
  int64_t best = 0;
  for (size_t i = 1; i < g.size(); ++i) {
    double v = g[i], c = g[size_t(best)];
    if (std::isnan(c)) break;
    if (std::isnan(v) || (is_max ? v > c : v < c)) best = int64_t(i);
  }
  return best;
}

// Expected output shape of a reduction.
inline Shape out_shape(const Shape& s, const DimList& dims, bool keepdim) {
  Shape r;
  for (size_t d = 0; d < s.size(); ++d) {
    bool red = dims.empty() || std::find(dims.begin(), dims.end(), int64_t(d)) != dims.end();
    if (!red)
      r.push_back(s[d]);
    else if (keepdim)
      r.push_back(1);
  }
  return r;
}

// Every subset of {0..nd-1} (the empty subset meaning all dims).
inline std::vector<DimList> all_subsets(int64_t nd) {
  std::vector<DimList> r;
  for (int mask = 0; mask < (1 << nd); ++mask) {
    DimList d;
    for (int64_t i = 0; i < nd; ++i)
      if (mask & (1 << i)) d.push_back(i);
    r.push_back(d);
  }
  return r;
}

// Input variants: contiguous, strided (noncontiguous), and a transposed view.
inline std::vector<Tensor> layouts(const Tensor& x) {
  Tensor tr = x.transpose(0, x.dim() - 1).contiguous().transpose(0, x.dim() - 1);
  return {x, noncontiguous(x), tr};
}

// Checks f(x, dims, keepdim) against ref over every dim subset, both keepdims, all layouts.
inline void check_all_dims(const Shape& shape, DType dt, const RefFn& ref,
                           const std::function<Tensor(const Tensor&, const DimList&, bool)>& f,
                           DType out_dt, double rtol = -1, double atol = -1) {
  Tensor x0 = random_tensor(shape, dt, 7 + shape.size(), -3, 3);
  for (const Tensor& x : layouts(x0)) {
    for (const DimList& dims : all_subsets(int64_t(shape.size()))) {
      for (bool keepdim : {false, true}) {
        CAPTURE(shape_str(dims));
        CAPTURE(keepdim);
        Tensor y = f(x, dims, keepdim);
        CHECK(y.dtype() == out_dt);
        REQUIRE(y.shape() == out_shape(shape, dims, keepdim));
        if (rtol < 0)
          check_close(y, ref_reduce(x, dims, ref));
        else
          check_close(y, ref_reduce(x, dims, ref), rtol, atol);
      }
    }
  }
}

inline const std::vector<DType> kFloatTypes = {kFloat32, kFloat64, kFloat16, kBFloat16};
inline const std::vector<Shape> kShapes = {{3, 4, 5}, {2, 3, 1, 17}, {4, 33, 2}};

}  // namespace reduce_reference
