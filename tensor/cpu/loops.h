// CPU elementwise loop machinery: walks tensors of one shape (any strides, broadcast
// strides of 0 included) in coalesced rows, split across OpenMP threads for large sizes.
#pragma once
#include <algorithm>
#include <array>
#include <functional>
#include <cstdint>
#include <vector>

#include "tensor/parallel_for.h"
#include "tensor/tensor.h"

namespace minidl::cpu {

template <size_t N>
struct RowPlan {
  std::vector<int64_t> shape;                  // coalesced, innermost last
  std::array<std::vector<int64_t>, N> stride;  // bytes, per tensor, per dim
  std::array<char*, N> base;
  int64_t numel = 1;
};

// All tensors must share tensors[0]'s shape (the output first).
template <size_t N>
RowPlan<N> make_row_plan(const std::array<const Tensor*, N>& ts) {
  RowPlan<N> p;
  const Shape& shape = ts[0]->shape();
  for (size_t k = 0; k < N; ++k) {
    MINIDL_CHECK(ts[k]->shape() == shape, "internal: loop operand ", k, " has shape ",
                 ts[k]->shape_str(), ", expected ", ts[0]->shape_str());
    p.base[k] = static_cast<char*>(ts[k]->data_ptr());
  }
  // Keep dims of size != 1, then merge dim d into d-1 when every tensor is contiguous across.
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    int64_t sz = shape[d];
    if (!p.shape.empty()) {
      bool merge = true;
      for (size_t k = 0; k < N; ++k) {
        int64_t s = ts[k]->strides()[d] * int64_t(ts[k]->element_size());
        if (p.stride[k].back() != s * sz) merge = false;
      }
      if (merge) {
        p.shape.back() *= sz;
        for (size_t k = 0; k < N; ++k)
          p.stride[k].back() = ts[k]->strides()[d] * int64_t(ts[k]->element_size());
        continue;
      }
    }
    p.shape.push_back(sz);
    for (size_t k = 0; k < N; ++k)
      p.stride[k].push_back(ts[k]->strides()[d] * int64_t(ts[k]->element_size()));
  }
  if (p.shape.empty()) {  // 0-d or all-ones
    p.shape.push_back(1);
    for (size_t k = 0; k < N; ++k) p.stride[k].push_back(0);
  }
  for (int64_t s : p.shape) p.numel *= s;
  return p;
}

// Calls row(ptrs, inner_byte_strides, count) for every run of the innermost dim.
template <size_t N, typename RowFn>
void for_each_row(const std::array<const Tensor*, N>& ts, RowFn&& row,
                  int64_t grain = kParallelGrain) {
  RowPlan<N> p = make_row_plan<N>(ts);
  if (p.numel == 0) return;
  const int64_t nd = int64_t(p.shape.size());
  const int64_t inner = p.shape.back();
  std::array<int64_t, N> inner_stride;
  for (size_t k = 0; k < N; ++k) inner_stride[k] = p.stride[k].back();
  auto run = [&](int64_t begin, int64_t end) {
    // multi-index of `begin`
    std::vector<int64_t> idx(nd);
    int64_t rem = begin;
    for (int64_t d = nd - 1; d >= 0; --d) {
      idx[d] = rem % p.shape[d];
      rem /= p.shape[d];
    }
    int64_t pos = begin;
    while (pos < end) {
      std::array<char*, N> ptr;
      for (size_t k = 0; k < N; ++k) {
        char* q = p.base[k];
        for (int64_t d = 0; d < nd; ++d) q += idx[d] * p.stride[k][d];
        ptr[k] = q;
      }
      int64_t n = std::min(inner - idx[nd - 1], end - pos);
      row(ptr, inner_stride, n);
      pos += n;
      idx[nd - 1] += n;
      for (int64_t d = nd - 1; d > 0 && idx[d] == p.shape[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
      }
    }
  };
  if (p.numel < 2 * grain)
    run(0, p.numel);
  else
    parallel_for(p.numel, grain, run);
}

// out[i] = f(in[i]) with element types TO, TI. Contiguous rows get a plain pointer loop.
template <typename TO, typename TI, typename F>
void unary_loop(const Tensor& in, Tensor& out, F f) {
  for_each_row<2>({&out, &in}, [&](std::array<char*, 2> p, std::array<int64_t, 2> s, int64_t n) {
    TO* o = reinterpret_cast<TO*>(p[0]);
    const TI* a = reinterpret_cast<const TI*>(p[1]);
    if (s[0] == sizeof(TO) && s[1] == sizeof(TI)) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<TO*>(p[0] + i * s[0]) = f(*reinterpret_cast<const TI*>(p[1] + i * s[1]));
    }
  });
}

// out[i] = f(a[i], b[i]); fast paths for contiguous rows and a broadcast scalar operand.
template <typename TO, typename TA, typename TB, typename F>
void binary_loop(const Tensor& a, const Tensor& b, Tensor& out, F f) {
  for_each_row<3>({&out, &a, &b}, [&](std::array<char*, 3> p, std::array<int64_t, 3> s, int64_t n) {
    TO* o = reinterpret_cast<TO*>(p[0]);
    const TA* x = reinterpret_cast<const TA*>(p[1]);
    const TB* y = reinterpret_cast<const TB*>(p[2]);
    if (s[0] == sizeof(TO) && s[1] == sizeof(TA) && s[2] == sizeof(TB)) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
    } else if (s[0] == sizeof(TO) && s[1] == sizeof(TA) && s[2] == 0) {
      const TB yv = *y;
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], yv);
    } else if (s[0] == sizeof(TO) && s[1] == 0 && s[2] == sizeof(TB)) {
      const TA xv = *x;
      for (int64_t i = 0; i < n; ++i) o[i] = f(xv, y[i]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<TO*>(p[0] + i * s[0]) = f(*reinterpret_cast<const TA*>(p[1] + i * s[1]),
                                                    *reinterpret_cast<const TB*>(p[2] + i * s[2]));
    }
  });
}

}  // namespace minidl::cpu
