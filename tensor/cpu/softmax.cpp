// CPU kernels: softmax, log_softmax and their backward passes along one dim, on contiguous
// buffers (f16/bf16 widened to f32 a row or a tile at a time): rows when the dim is innermost, else
// tiles of adjacent lines vectorised across the inner dim (no transposes). Eigen arrays for exp;
// parallel.
#include <Eigen/Core>
#include <cmath>
#include <algorithm>
#include <limits>
#include <vector>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/dispatch.h"
#include "tensor/ops.h"

namespace minidl::cpu {
namespace {

template <typename S>
using CArr = Eigen::Map<const Eigen::Array<S, Eigen::Dynamic, 1>>;
template <typename S>
using Arr = Eigen::Map<Eigen::Array<S, Eigen::Dynamic, 1>>;

// sum(a) and sum(a*b) accumulated in double with independent partial sums.
template <typename S>
double sum_double(const S* a, int64_t n) {
  double acc[4] = {};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) acc[j] += double(a[i + j]);
  double s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  for (; i < n; ++i) s += double(a[i]);
  return s;
}
template <typename S>
double dot_double(const S* a, const S* b, int64_t n) {
  double acc[4] = {};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) acc[j] += double(a[i + j]) * double(b[i + j]);
  double s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  for (; i < n; ++i) s += double(a[i]) * double(b[i]);
  return s;
}

// Runs the op over every line along `dim` in compute type S (float for f32/f16/bf16, double
// for f64) on contiguous buffers: row(o, a, b, K) when `dim` is innermost, else
// col(o, a, b, K, stride, len) on tiles of up to kTile adjacent lines (vectorised across lines).
// `b` may be undefined (then its pointers are nullptr).
constexpr int64_t kTile = 128;

// f16/bf16 lines: widened into per-task f32 buffers one row, or one tile of at most
// kHalfTileElems elements, at a time (the same row/col functions on the same float values as
// for an f32 copy of the whole tensor, without that copy), narrowed once on the store.
constexpr int64_t kHalfTileElems = 65536;

template <typename T, typename RowFn, typename ColFn>
void half_line_op(const Tensor& a, const Tensor& b, Tensor& out, int64_t dim, RowFn row,
                  ColFn col) {
  const Tensor ca = native::contiguous(a), cb = b.defined() ? native::contiguous(b) : Tensor();
  const bool direct = out.is_contiguous();
  Tensor ro = direct ? out : empty(out.shape(), out.dtype());
  const int64_t K = out.size(dim);
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < out.dim(); ++d) inner *= out.size(d);
  const int64_t outer = out.numel() / (K * inner);
  const T* pa = ca.data_ptr<T>();
  const T* pb = cb.defined() ? cb.data_ptr<T>() : nullptr;
  T* po = ro.data_ptr<T>();
  // lines [j0, j0+len) of block o: element (k, j) at src[k*inner + j] <-> buf[k*len + j]
  // A block that spans whole lines (rows when `dim` is innermost) is contiguous: one flat loop,
  // which vectorises (the nested one with a length-1 inner loop did not).
  auto widen = [&](const T* __restrict src, float* __restrict buf, int64_t len) {
    if (len == inner) {
      for (int64_t i = 0, n = K * len; i < n; ++i) buf[i] = float(src[i]);
      return;
    }
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < len; ++j) buf[k * len + j] = float(src[k * inner + j]);
  };
  auto narrow = [&](const float* __restrict buf, T* __restrict dst, int64_t len) {
    if (len == inner) {
      for (int64_t i = 0, n = K * len; i < n; ++i) dst[i] = T(buf[i]);
      return;
    }
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < len; ++j) dst[k * inner + j] = T(buf[k * len + j]);
  };
  const int64_t tile = inner == 1 ? 1 : std::clamp<int64_t>(kHalfTileElems / K, 1, kTile);
  const int64_t tiles = (inner + tile - 1) / tile;
  parallel_for(outer * tiles, std::max<int64_t>(1, kParallelGrain / (K * tile)),
               [&](int64_t lo, int64_t hi) {
                 const size_t n = size_t(K * tile);
                 std::vector<float> xa(n), xb(pb ? n : 0), xo(n);
                 for (int64_t i = lo; i < hi; ++i) {
                   const int64_t o = i / tiles, j0 = (i % tiles) * tile;
                   const int64_t off = o * K * inner + j0, len = std::min(tile, inner - j0);
                   widen(pa + off, xa.data(), len);
                   if (pb) widen(pb + off, xb.data(), len);
                   const float* bp = pb ? xb.data() : nullptr;
                   if (inner == 1)
                     row(xo.data(), xa.data(), bp, K);
                   else
                     col(xo.data(), xa.data(), bp, K, len, len);
                   narrow(xo.data(), po + off, len);
                 }
               });
  if (!direct) native::copy_(out, ro);
}

template <typename RowFn, typename ColFn>
void line_op(const Tensor& a, const Tensor& b, Tensor& out, int64_t dim, std::string_view op,
             RowFn row, ColFn col) {
  if (out.numel() == 0) return;
  dispatch_floating(out.dtype(), op, [&]<typename T>() {
    if constexpr (is_reduced_float_v<T>) {
      if (a.dtype() == out.dtype() && (!b.defined() || b.dtype() == out.dtype())) {
        half_line_op<T>(a, b, out, dim, row, col);
        return;
      }
    }
    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const DType sdt = dtype_of<S>();
    auto prep = [&](const Tensor& t) {
      return t.dtype() != sdt ? native::to(t, sdt) : native::contiguous(t);
    };
    const Tensor ra = prep(a);
    const Tensor rb = b.defined() ? prep(b) : Tensor();
    const bool direct = out.is_contiguous() && out.dtype() == sdt;
    Tensor ro = direct ? out : empty(out.shape(), sdt);
    const int64_t K = out.size(dim);
    int64_t inner = 1;
    for (int64_t d = dim + 1; d < out.dim(); ++d) inner *= out.size(d);
    const int64_t outer = out.numel() / (K * inner);
    const S* pa = static_cast<const S*>(ra.data_ptr());
    const S* pb = rb.defined() ? static_cast<const S*>(rb.data_ptr()) : nullptr;
    S* po = static_cast<S*>(ro.data_ptr());
    if (inner == 1) {
      parallel_for(outer, std::max<int64_t>(1, kParallelGrain / K), [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) row(po + r * K, pa + r * K, pb ? pb + r * K : nullptr, K);
      });
    } else {
      const int64_t tiles = (inner + kTile - 1) / kTile;
      parallel_for(outer * tiles, std::max<int64_t>(1, kParallelGrain / (K * kTile)),
                   [&](int64_t lo, int64_t hi) {
                     for (int64_t i = lo; i < hi; ++i) {
                       const int64_t o = i / tiles, j0 = (i % tiles) * kTile;
                       const int64_t off = o * K * inner + j0;
                       col(po + off, pa + off, pb ? pb + off : nullptr, K, inner,
                           std::min(kTile, inner - j0));
                     }
                   });
    }
    if (!direct) native::copy_(out, ro);
  });
}

// y = exp(x - max) / sum; a NaN (or an all -inf row) gives NaN as PyTorch.
template <typename S>
void softmax_row(S* o, const S* x, const S*, int64_t n) {
  CArr<S> xa(x, n);
  Arr<S> y(o, n);
  const S m = xa.template maxCoeff<Eigen::PropagateNaN>();
  y = (xa - m).exp();
  y *= S(1.0 / sum_double(o, n));
}

// y = x - max - log(sum(exp(x - max)))
template <typename S>
void log_softmax_row(S* o, const S* x, const S*, int64_t n) {
  CArr<S> xa(x, n);
  Arr<S> y(o, n);
  const S m = xa.template maxCoeff<Eigen::PropagateNaN>();
  y = (xa - m).exp();
  const S lse = S(std::log(sum_double(o, n)));
  y = (xa - m) - lse;
}

// Column versions: lines x[k*stride + j], j < len. Fills mx (NaN-propagating max) and
// s = sum_k exp(x - mx), writing exp(x - mx) into o.
template <typename S>
void exp_sum_cols(S* o, const S* x, int64_t K, int64_t stride, int64_t len, S* mx, double* s) {
  for (int64_t j = 0; j < len; ++j) mx[j] = -std::numeric_limits<S>::infinity(), s[j] = 0;
  for (int64_t k = 0; k < K; ++k) {
    const S* r = x + k * stride;
    for (int64_t j = 0; j < len; ++j) mx[j] = (r[j] > mx[j] || r[j] != r[j]) ? r[j] : mx[j];
  }
  for (int64_t k = 0; k < K; ++k) {
    S* orow = o + k * stride;
    Arr<S>(orow, len) = (CArr<S>(x + k * stride, len) - CArr<S>(mx, len)).exp();
    for (int64_t j = 0; j < len; ++j) s[j] += double(orow[j]);
  }
}

template <typename S>
void softmax_col(S* o, const S* x, const S*, int64_t K, int64_t stride, int64_t len) {
  S mx[kTile], inv[kTile];
  double s[kTile];
  exp_sum_cols(o, x, K, stride, len, mx, s);
  for (int64_t j = 0; j < len; ++j) inv[j] = S(1.0 / s[j]);
  for (int64_t k = 0; k < K; ++k) Arr<S>(o + k * stride, len) *= CArr<S>(inv, len);
}

template <typename S>
void log_softmax_col(S* o, const S* x, const S*, int64_t K, int64_t stride, int64_t len) {
  S mx[kTile], lse[kTile];
  double s[kTile];
  exp_sum_cols(o, x, K, stride, len, mx, s);
  for (int64_t j = 0; j < len; ++j) lse[j] = S(std::log(s[j]));
  for (int64_t k = 0; k < K; ++k)
    Arr<S>(o + k * stride, len) =
        (CArr<S>(x + k * stride, len) - CArr<S>(mx, len)) - CArr<S>(lse, len);
}

// grad_in = y * (g - sum(g * y))
template <typename S>
void softmax_backward_row(S* o, const S* g, const S* y, int64_t n) {
  const S dot = S(dot_double(g, y, n));
  Arr<S>(o, n) = CArr<S>(y, n) * (CArr<S>(g, n) - dot);
}
template <typename S>
void softmax_backward_col(S* o, const S* g, const S* y, int64_t K, int64_t stride, int64_t len) {
  double dot[kTile] = {};
  S d[kTile];
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < len; ++j)
      dot[j] += double(g[k * stride + j]) * double(y[k * stride + j]);
  for (int64_t j = 0; j < len; ++j) d[j] = S(dot[j]);
  for (int64_t k = 0; k < K; ++k) {
    const int64_t off = k * stride;
    Arr<S>(o + off, len) = CArr<S>(y + off, len) * (CArr<S>(g + off, len) - CArr<S>(d, len));
  }
}

// grad_in = g - exp(y) * sum(g)
template <typename S>
void log_softmax_backward_row(S* o, const S* g, const S* y, int64_t n) {
  const S s = S(sum_double(g, n));
  Arr<S>(o, n) = CArr<S>(g, n) - CArr<S>(y, n).exp() * s;
}
template <typename S>
void log_softmax_backward_col(S* o, const S* g, const S* y, int64_t K, int64_t stride,
                              int64_t len) {
  double sum[kTile] = {};
  S s[kTile];
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < len; ++j) sum[j] += double(g[k * stride + j]);
  for (int64_t j = 0; j < len; ++j) s[j] = S(sum[j]);
  for (int64_t k = 0; k < K; ++k) {
    const int64_t off = k * stride;
    Arr<S>(o + off, len) = CArr<S>(g + off, len) - CArr<S>(y + off, len).exp() * CArr<S>(s, len);
  }
}

// Generic lambdas forwarding to fn_row<S> / fn_col<S> (S is chosen inside line_op).
#define MINIDL_LINE_FNS(fn)                                                                     \
  [](auto* o, const auto* a, const auto* b, int64_t n) {                                        \
    fn##_row<std::remove_const_t<std::remove_pointer_t<decltype(a)>>>(o, a, b, n);              \
  },                                                                                            \
      [](auto* o, const auto* a, const auto* b, int64_t K, int64_t st, int64_t len) {           \
        fn##_col<std::remove_const_t<std::remove_pointer_t<decltype(a)>>>(o, a, b, K, st, len); \
      }

void softmax_kernel(const Tensor& in, Tensor& out, int64_t dim) {
  line_op(in, Tensor(), out, dim, "softmax", MINIDL_LINE_FNS(softmax));
}
void log_softmax_kernel(const Tensor& in, Tensor& out, int64_t dim) {
  line_op(in, Tensor(), out, dim, "log_softmax", MINIDL_LINE_FNS(log_softmax));
}
void softmax_backward_kernel(const Tensor& grad_out, const Tensor& out, Tensor& grad_in,
                             int64_t dim) {
  line_op(grad_out, out, grad_in, dim, "softmax_backward", MINIDL_LINE_FNS(softmax_backward));
}
void log_softmax_backward_kernel(const Tensor& grad_out, const Tensor& out, Tensor& grad_in,
                                 int64_t dim) {
  line_op(grad_out, out, grad_in, dim, "log_softmax_backward",
          MINIDL_LINE_FNS(log_softmax_backward));
}

#undef MINIDL_LINE_FNS

}  // namespace

void register_softmax_kernels() {
  register_kernel<Op::softmax>(DeviceType::cpu, softmax_kernel);
  register_kernel<Op::log_softmax>(DeviceType::cpu, log_softmax_kernel);
  register_kernel<Op::softmax_backward>(DeviceType::cpu, softmax_backward_kernel);
  register_kernel<Op::log_softmax_backward>(DeviceType::cpu, log_softmax_backward_kernel);
}

}  // namespace minidl::cpu
