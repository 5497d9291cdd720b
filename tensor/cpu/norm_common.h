// CPU helpers shared by the layer_norm (layer_norm.cpp) and batch_norm (norm.cpp) kernels:
// double lane sums, 1-D parameters as vectors, the row grain.
#pragma once
#include <algorithm>
#include <type_traits>
#include <vector>

#include "tensor/cpu/loops.h"
#include "tensor/dispatch.h"
#include "tensor/ops.h"

namespace minidl::cpu::norm_detail {

// Saved statistics type: double for f64 inputs, float otherwise.
template <typename T>
using stat_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// sum_{i<n} f(i) in double with 8 independent accumulators (vectorisable without -ffast-math).
template <typename F>
inline double lane_sum(int64_t n, F&& f) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += f(i + k);
  double tail = 0;
  for (; i < n; ++i) tail += f(i);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

// A 1-D parameter ([n] elements in row-major order, any floating dtype) as a vector of A;
// `dflt` everywhere when t is undefined.
template <typename A>
std::vector<A> load_vec(const Tensor& t, int64_t n, A dflt) {
  std::vector<A> v(size_t(n), dflt);
  if (!t.defined()) return v;
  Tensor c = native::contiguous(t);
  dispatch_floating(c.dtype(), "norm parameter", [&]<typename T>() {
    const T* p = c.data_ptr<T>();
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = A(static_cast<opmath_t<T>>(p[i]));
  });
  return v;
}

// Writes v into a 1-D tensor (any floating dtype, any stride).
inline void store_vec(Tensor& t, const std::vector<double>& v) {
  dispatch_floating(t.dtype(), "norm parameter", [&]<typename T>() {
    T* p = static_cast<T*>(t.data_ptr());
    const int64_t st = t.dim() == 0 ? 0 : t.stride(-1);
    for (size_t i = 0; i < v.size(); ++i) p[int64_t(i) * st] = T(static_cast<opmath_t<T>>(v[i]));
  });
}

inline int64_t rows_grain(int64_t row_len) {
  return std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(row_len, 1));
}

// Registers layer_norm, add_layer_norm and their backward kernels (layer_norm.cpp).
void register_layer_norm_kernels();

}  // namespace minidl::cpu::norm_detail
