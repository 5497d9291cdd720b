// CPU kernels: conv2d forward and both backward passes by im2col + GEMM (Eigen row-major maps),
// one image per GEMM, parallel over images under a fixed workspace budget (kConvWorkspaceBudget).
// f16/bf16 compute in float. The frontend passes contiguous x:[N,C,H,W], w:[O,C/g,kh,kw], bias:[O].
#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/cpu/onednn.h"
#include "tensor/dispatch.h"
#include "tensor/ops.h"

namespace minidl::cpu {
namespace {

template <typename A>
using RowMat = Eigen::Matrix<A, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename A>
using CMap = Eigen::Map<const RowMat<A>>;
template <typename A>
using MMap = Eigen::Map<RowMat<A>>;

// Sizes of one convolution. Per group, the column matrix is [K = Cg*kh*kw, L = Ho*Wo].
struct Geom {
  int64_t N, C, H, W, O, kh, kw, Ho, Wo, G;
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t Cg, Og, K, L, HW;
  // A 1x1 kernel with unit stride and no padding: the column matrix is the input itself.
  bool identity_cols() const { return kh == 1 && kw == 1 && sh == 1 && sw == 1 && !ph && !pw; }
};

Geom make_geom(const Shape& x, const Shape& w, const Shape& out, const Conv2dParams& p) {
  Geom g{x[0],
         x[1],
         x[2],
         x[3],
         w[0],
         w[2],
         w[3],
         out[2],
         out[3],
         p.groups,
         p.stride[0],
         p.stride[1],
         p.padding[0],
         p.padding[1],
         p.dilation[0],
         p.dilation[1],
         0,
         0,
         0,
         0,
         0};
  g.Cg = g.C / g.G;
  g.Og = g.O / g.G;
  g.K = g.Cg * g.kh * g.kw;
  g.L = g.Ho * g.Wo;
  g.HW = g.H * g.W;
  return g;
}

// x: one group's channels [Cg,H,W] -> col [K, L], converting T to the compute type A.
template <typename T, typename A>
void im2col(const T* x, A* col, const Geom& g) {
  for (int64_t c = 0; c < g.Cg; ++c) {
    const T* plane = x + c * g.HW;
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        A* row = col + ((c * g.kh + i) * g.kw + j) * g.L;
        const int64_t iw0 = j * g.dw - g.pw;
        // output columns whose input column iw = ow*sw + iw0 lies in [0, W)
        int64_t lo = iw0 >= 0 ? 0 : (-iw0 + g.sw - 1) / g.sw;
        int64_t hi = g.W - iw0 <= 0 ? 0 : (g.W - iw0 + g.sw - 1) / g.sw;
        lo = std::min(lo, g.Wo);
        hi = std::clamp(hi, lo, g.Wo);
        for (int64_t oh = 0; oh < g.Ho; ++oh) {
          A* dst = row + oh * g.Wo;
          const int64_t ih = oh * g.sh - g.ph + i * g.dh;
          if (ih < 0 || ih >= g.H) {
            std::fill(dst, dst + g.Wo, A(0));
            continue;
          }
          const T* src = plane + ih * g.W + (lo * g.sw + iw0);  // input of column lo
          std::fill(dst, dst + lo, A(0));
          if (g.sw == 1) {
            for (int64_t k = 0; k < hi - lo; ++k) dst[lo + k] = A(static_cast<opmath_t<T>>(src[k]));
          } else {
            for (int64_t k = 0; k < hi - lo; ++k)
              dst[lo + k] = A(static_cast<opmath_t<T>>(src[k * g.sw]));
          }
          std::fill(dst + hi, dst + g.Wo, A(0));
        }
      }
    }
  }
}

// Adds col [K, L] back onto one group's channels dx [Cg,H,W] (the adjoint of im2col).
template <typename A>
void col2im_add(const A* col, A* dx, const Geom& g) {
  for (int64_t c = 0; c < g.Cg; ++c) {
    A* plane = dx + c * g.HW;
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        const A* row = col + ((c * g.kh + i) * g.kw + j) * g.L;
        const int64_t iw0 = j * g.dw - g.pw;
        int64_t lo = iw0 >= 0 ? 0 : (-iw0 + g.sw - 1) / g.sw;
        int64_t hi = g.W - iw0 <= 0 ? 0 : (g.W - iw0 + g.sw - 1) / g.sw;
        lo = std::min(lo, g.Wo);
        hi = std::clamp(hi, lo, g.Wo);
        for (int64_t oh = 0; oh < g.Ho; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + i * g.dh;
          if (ih < 0 || ih >= g.H) continue;
          const A* src = row + oh * g.Wo + lo;
          A* dst = plane + ih * g.W + (lo * g.sw + iw0);  // input of column lo
          if (g.sw == 1) {
            for (int64_t k = 0; k < hi - lo; ++k) dst[k] += src[k];
          } else {
            for (int64_t k = 0; k < hi - lo; ++k) dst[k * g.sw] += src[k];
          }
        }
      }
    }
  }
}

// Converts n values of T to A (a copy when they are the same type).
template <typename A, typename T>
void to_compute(const T* src, A* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = A(static_cast<opmath_t<T>>(src[i]));
}
template <typename T, typename A>
void from_compute(const A* src, T* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = T(src[i]);
}

// A read-only array in the compute type A: the tensor's own data when T == A, else a
// converted copy (f16/bf16 weights and biases are converted once per call).
template <typename T, typename A = opmath_t<T>>
class ComputeArray {
 public:
  explicit ComputeArray(const Tensor& t) {
    if (!t.defined()) return;
    if constexpr (std::is_same_v<A, T>) {
      data_ = t.data_ptr<T>();
    } else {
      buf_.resize(size_t(t.numel()));
      to_compute(t.data_ptr<T>(), buf_.data(), t.numel());
      data_ = buf_.data();
    }
  }
  const A* data() const { return data_; }

 private:
  std::vector<A> buf_;
  const A* data_ = nullptr;
};

// ---- workspace budget: each worker converts one image at a time through its own buffers
// (a column matrix [K, L] and, for f16/bf16, an f32 image), so no buffer grows with the batch.
// The number of concurrent workers is capped so that their buffers fit the budget (at least one
// worker, which then processes image after image).
std::atomic<int64_t> g_workspace_budget{kConvWorkspaceBudget};

// An uninitialised buffer of n values of A, allocated as tensor storage so that memory_stats
// counts it.
template <typename A>
class Workspace {
 public:
  explicit Workspace(int64_t n) : t_(empty({n}, dtype_of<A>())) {}
  A* data() { return static_cast<A*>(t_.data_ptr()); }

 private:
  Tensor t_;
};

// Splits the N images into `workers` contiguous ranges (worker w: [w*chunk, (w+1)*chunk)) and
// runs fn(w, begin, end) for each, in parallel when there are several.
void for_worker_ranges(int64_t N, int64_t workers,
                       const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  if (N <= 0) return;
  const int64_t chunk = (N + workers - 1) / workers;
  parallel_for(workers, 1, [&](int64_t wb, int64_t we) {
    for (int64_t w = wb; w < we; ++w) {
      const int64_t b = w * chunk, e = std::min(N, b + chunk);
      if (b < e) fn(w, b, e);
    }
  });
}

// Workers for N images whose per-worker buffers take `per_worker` bytes: one per thread when
// there are enough images (otherwise one, so that Eigen's GEMM can use the threads itself),
// and no more than the budget holds.
int64_t num_workers(int64_t N, int64_t per_worker) {
  const int64_t threads = get_num_threads();
  if (N < 2 || N < threads) return 1;
  const int64_t fit = per_worker > 0 ? g_workspace_budget / per_worker : threads;
  return std::clamp<int64_t>(fit, 1, threads);
}

template <typename T>
void conv2d_impl(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
                 const Conv2dParams& p) {
  using A = opmath_t<T>;
  constexpr bool same = std::is_same_v<A, T>;
  const Geom g = make_geom(x.shape(), w.shape(), out.shape(), p);
  const T* xp = x.data_ptr<T>();
  T* op = out.data_ptr<T>();
  const ComputeArray<T> w_compute(w), bias_compute(bias);
  const A* wa = w_compute.data();
  const A* ba = bias_compute.data();  // nullptr without bias
  const bool direct = same && g.identity_cols();
  const int64_t col_n = direct ? 0 : g.K * g.L, obuf_n = same ? 0 : g.O * g.L;
  const int64_t workers = num_workers(g.N, (col_n + obuf_n) * int64_t(sizeof(A)));
  for_worker_ranges(g.N, workers, [&](int64_t, int64_t begin, int64_t end) {
    Workspace<A> col(col_n), obuf(obuf_n);
    for (int64_t n = begin; n < end; ++n) {
      const T* xn = xp + n * g.C * g.HW;
      A* on = same ? reinterpret_cast<A*>(op + n * g.O * g.L) : obuf.data();
      for (int64_t gi = 0; gi < g.G; ++gi) {
        const A* cp;
        if (direct) {
          cp = reinterpret_cast<const A*>(xn + gi * g.Cg * g.HW);
        } else {
          im2col<T, A>(xn + gi * g.Cg * g.HW, col.data(), g);
          cp = col.data();
        }
        MMap<A> om(on + gi * g.Og * g.L, g.Og, g.L);
        om.noalias() = CMap<A>(wa + gi * g.Og * g.K, g.Og, g.K) * CMap<A>(cp, g.K, g.L);
      }
      if (ba) {  // row o of [O, L] += bias[o]
        for (int64_t o = 0; o < g.O; ++o) {
          A* row = on + o * g.L;
          const A bo = ba[o];
          for (int64_t l = 0; l < g.L; ++l) row[l] += bo;
        }
      }
      if constexpr (!same) from_compute<T, A>(on, op + n * g.O * g.L, g.O * g.L);
    }
  });
}

// grad_x[n] = col2im(W^T grad_out[n]) per group.
template <typename T>
void conv2d_backward_input_impl(const Tensor& grad_out, const Tensor& w, Tensor& grad_x,
                                const Conv2dParams& p) {
  using A = opmath_t<T>;
  constexpr bool same = std::is_same_v<A, T>;
  const Geom g = make_geom(grad_x.shape(), w.shape(), grad_out.shape(), p);
  const T* gp = grad_out.data_ptr<T>();
  T* dxp = grad_x.data_ptr<T>();
  const ComputeArray<T> w_compute(w);
  const A* wa = w_compute.data();
  const bool direct = g.identity_cols();
  const int64_t col_n = direct ? 0 : g.K * g.L;
  const int64_t gbuf_n = same ? 0 : g.O * g.L, dxbuf_n = same ? 0 : g.C * g.HW;
  const int64_t workers = num_workers(g.N, (col_n + gbuf_n + dxbuf_n) * int64_t(sizeof(A)));
  for_worker_ranges(g.N, workers, [&](int64_t, int64_t begin, int64_t end) {
    Workspace<A> col(col_n), gbuf(gbuf_n), dxbuf(dxbuf_n);
    for (int64_t n = begin; n < end; ++n) {
      const A* gn;
      A* dxn;
      if constexpr (same) {
        gn = gp + n * g.O * g.L;
        dxn = dxp + n * g.C * g.HW;
      } else {
        to_compute(gp + n * g.O * g.L, gbuf.data(), g.O * g.L);
        gn = gbuf.data();
        dxn = dxbuf.data();
      }
      if (!direct) std::fill(dxn, dxn + g.C * g.HW, A(0));
      for (int64_t gi = 0; gi < g.G; ++gi) {
        CMap<A> wm(wa + gi * g.Og * g.K, g.Og, g.K);
        CMap<A> gm(gn + gi * g.Og * g.L, g.Og, g.L);
        A* dxg = dxn + gi * g.Cg * g.HW;
        if (direct) {  // K = Cg, L = H*W: the product is the gradient itself
          MMap<A>(dxg, g.K, g.L).noalias() = wm.transpose() * gm;
        } else {
          MMap<A>(col.data(), g.K, g.L).noalias() = wm.transpose() * gm;
          col2im_add(col.data(), dxg, g);
        }
      }
      if constexpr (!same) from_compute<T, A>(dxn, dxp + n * g.C * g.HW, g.C * g.HW);
    }
  });
}

// grad_w[g] = sum_n grad_out[n][g] col[n][g]^T. Each worker sums its contiguous range of images
// into its own partial; the partials are then added in worker order, so the result depends only
// on the number of workers (the thread count and the budget), never on thread timing.
template <typename T>
void conv2d_backward_weight_impl(const Tensor& grad_out, const Tensor& x, Tensor& grad_w,
                                 const Conv2dParams& p) {
  using A = opmath_t<T>;
  constexpr bool same = std::is_same_v<A, T>;
  const Geom g = make_geom(x.shape(), grad_w.shape(), grad_out.shape(), p);
  const T* gp = grad_out.data_ptr<T>();
  const T* xp = x.data_ptr<T>();
  const int64_t wn = g.O * g.K;
  const bool direct = same && g.identity_cols();
  const int64_t col_n = direct ? 0 : g.K * g.L, gbuf_n = same ? 0 : g.O * g.L;
  const int64_t workers = num_workers(g.N, (col_n + gbuf_n + wn) * int64_t(sizeof(A)));
  std::vector<A> parts(size_t(workers * wn), A(0));
  for_worker_ranges(g.N, workers, [&](int64_t wi, int64_t begin, int64_t end) {
    Workspace<A> col(col_n), gbuf(gbuf_n);
    A* part = parts.data() + wi * wn;
    for (int64_t n = begin; n < end; ++n) {
      const T* xn = xp + n * g.C * g.HW;
      const A* gn;
      if constexpr (same) {
        gn = gp + n * g.O * g.L;
      } else {
        to_compute(gp + n * g.O * g.L, gbuf.data(), g.O * g.L);
        gn = gbuf.data();
      }
      for (int64_t gi = 0; gi < g.G; ++gi) {
        const A* cp;
        if (direct) {
          cp = reinterpret_cast<const A*>(xn + gi * g.Cg * g.HW);
        } else {
          im2col<T, A>(xn + gi * g.Cg * g.HW, col.data(), g);
          cp = col.data();
        }
        MMap<A> pm(part + gi * g.Og * g.K, g.Og, g.K);
        pm.noalias() +=
            CMap<A>(gn + gi * g.Og * g.L, g.Og, g.L) * CMap<A>(cp, g.K, g.L).transpose();
      }
    }
  });
  std::vector<A> total(size_t(wn), A(0));
  for (int64_t wi = 0; wi < workers; ++wi)
    for (int64_t i = 0; i < wn; ++i) total[size_t(i)] += parts[size_t(wi * wn + i)];
  from_compute<T, A>(total.data(), grad_w.data_ptr<T>(), wn);
}

void conv2d_kernel(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
                   const Conv2dParams& p) {
  if (onednn::conv2d(x, w, bias, out, p)) return;  // oneDNN when the backend choice says so
  dispatch_floating(x.dtype(), "conv2d", [&]<typename T>() { conv2d_impl<T>(x, w, bias, out, p); });
}

void conv2d_backward_input_kernel(const Tensor& grad_out, const Tensor& w, Tensor& grad_x,
                                  const Conv2dParams& p) {
  if (onednn::conv2d_backward_input(grad_out, w, grad_x, p)) return;
  dispatch_floating(grad_out.dtype(), "conv2d_backward_input",
                    [&]<typename T>() { conv2d_backward_input_impl<T>(grad_out, w, grad_x, p); });
}

void conv2d_backward_weight_kernel(const Tensor& grad_out, const Tensor& x, Tensor& grad_w,
                                   const Conv2dParams& p) {
  if (onednn::conv2d_backward_weight(grad_out, x, grad_w, p)) return;
  dispatch_floating(grad_out.dtype(), "conv2d_backward_weight",
                    [&]<typename T>() { conv2d_backward_weight_impl<T>(grad_out, x, grad_w, p); });
}

}  // namespace

void set_conv_workspace_budget(int64_t bytes) {
  MINIDL_CHECK(bytes >= 0, "set_conv_workspace_budget: expected a non-negative byte count, got ",
               bytes);
  g_workspace_budget = bytes;
}
int64_t conv_workspace_budget() {
  return g_workspace_budget;
}

void register_conv_kernels() {
  register_kernel<Op::conv2d>(DeviceType::cpu, conv2d_kernel);
  register_kernel<Op::conv2d_backward_input>(DeviceType::cpu, conv2d_backward_input_kernel);
  register_kernel<Op::conv2d_backward_weight>(DeviceType::cpu, conv2d_backward_weight_kernel);
}

}  // namespace minidl::cpu
