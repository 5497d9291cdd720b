// CPU kernels: 2-D max pooling (with flat h*W+w indices per plane, NaN propagating) and
// average pooling (count_include_pad, divisor_override, ceil_mode), forward and backward.
// The frontend passes contiguous [N,C,H,W] tensors; planes are split across threads.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/dispatch.h"

namespace minidl::cpu {
namespace {

struct PoolGeom {
  int64_t planes, H, W, Ho, Wo;
};

PoolGeom pool_geom(const Shape& in, const Shape& out) {
  return {in[0] * in[1], in[2], in[3], out[2], out[3]};
}

// Runs fn(begin, end) over planes, in parallel when the work is large enough.
void for_planes(int64_t planes, int64_t work_per_plane,
                const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, work_per_plane));
  if (planes >= 2 * grain)
    parallel_for(planes, grain, fn);
  else if (planes > 0)
    fn(0, planes);
}

// The maximum of one window and its flat index: rows [ih0, ih1) step dh, columns [iw0, iw1)
// step dw (already clipped to the plane), scanned row-major: the first maximum wins, a later NaN
// replaces anything; an empty window gives -inf at (ih0, iw0), as PyTorch.
template <typename A, typename T>
inline std::pair<A, int64_t> window_max(const T* src, int64_t W, int64_t ih0, int64_t ih1,
                                        int64_t dh, int64_t iw0, int64_t iw1, int64_t dw) {
  A best = -std::numeric_limits<A>::infinity();
  int64_t best_at = ih0 * W + iw0;
  for (int64_t ih = ih0; ih < ih1; ih += dh)
    for (int64_t iw = iw0; iw < iw1; iw += dw) {
      const A v = static_cast<A>(src[ih * W + iw]);
      if (v > best || v != v) best = v, best_at = ih * W + iw;  // v != v: NaN
    }
  return {best, best_at};
}

// One window offset over a row of outputs: column k reads row[k * stride] and keeps it when it
// is larger or NaN (branch-free, so it vectorises; S > 0 fixes the stride at compile time).
template <int64_t S, typename T, typename A>
inline void max_sweep(const T* __restrict row, int64_t n, int64_t stride, int64_t base,
                      A* __restrict bv, int64_t* __restrict bi) {
  const int64_t st = S > 0 ? S : stride;
  for (int64_t k = 0; k < n; ++k) {
    const A v = static_cast<A>(row[k * st]);
    const bool take = (v > bv[k]) | (v != v);  // v != v: NaN
    bv[k] = take ? v : bv[k];
    bi[k] = take ? base + k * st : bi[k];
  }
}

// Max pooling with unit dilation (any padding, stride, ceil_mode). For each output row, the
// columns whose windows lie inside the row keep a running maximum and flat index each and are
// swept once per window offset (vectorised); the border columns take the scalar loop. Window
// cells are visited in the general loop's order (row-major), so ties and NaNs resolve the same
// way: the first maximum wins, a later NaN replaces anything.
template <typename T>
void max_pool2d_unit_dilation(const T* xp, T* op, int64_t* ip, const PoolGeom& g,
                              const Pool2dParams& p) {
  using A = opmath_t<T>;
  const int64_t kh = p.kernel[0], kw = p.kernel[1], sh = p.stride[0], sw = p.stride[1];
  const int64_t ph = p.padding[0], pw = p.padding[1];
  // Inside columns: ow * sw - pw >= 0 and ow * sw - pw + kw <= W.
  const int64_t ow_lo = std::min(g.Wo, (pw + sw - 1) / sw);
  const int64_t ow_hi =
      std::clamp(g.W + pw - kw >= 0 ? (g.W + pw - kw) / sw + 1 : int64_t(0), ow_lo, g.Wo);
  for_planes(g.planes, g.Ho * g.Wo * kh * kw, [&, g](int64_t begin, int64_t end) {
    const int64_t H = g.H, W = g.W, Ho = g.Ho, Wo = g.Wo, n = ow_hi - ow_lo;
    std::vector<A> best_v(static_cast<size_t>(n));
    std::vector<int64_t> best_i(static_cast<size_t>(n));
    A* bv = best_v.data();
    int64_t* bi = best_i.data();
    for (int64_t pl = begin; pl < end; ++pl) {
      const T* src = xp + pl * H * W;
      for (int64_t oh = 0; oh < Ho; ++oh) {
        const int64_t h0 = oh * sh - ph, ih_first = std::max<int64_t>(h0, 0);
        const int64_t ih_end = std::min(h0 + kh, H);
        T* dst = op + (pl * Ho + oh) * Wo;
        int64_t* idst = ip ? ip + (pl * Ho + oh) * Wo : nullptr;
        for (int64_t k = 0; k < n; ++k) {
          bv[k] = -std::numeric_limits<A>::infinity();
          bi[k] = ih_first * W + (ow_lo + k) * sw - pw;
        }
        for (int64_t ih = ih_first; ih < ih_end; ++ih) {
          for (int64_t j = 0; j < kw; ++j) {
            const int64_t base = ih * W + ow_lo * sw - pw + j;
            if (sw == 2)
              max_sweep<2>(src + base, n, sw, base, bv, bi);
            else if (sw == 1)
              max_sweep<1>(src + base, n, sw, base, bv, bi);
            else
              max_sweep<0>(src + base, n, sw, base, bv, bi);
          }
        }
        for (int64_t k = 0; k < n; ++k) dst[ow_lo + k] = T(bv[k]);
        if (idst) std::copy(bi, bi + n, idst + ow_lo);
        // Border columns: windows clipped at the left or right edge.
        auto border = [&](int64_t ow) {
          const int64_t w0 = ow * sw - pw;
          const auto [best, at] = window_max<A>(src, W, ih_first, ih_end, 1,
                                                std::max<int64_t>(w0, 0), std::min(w0 + kw, W), 1);
          dst[ow] = T(best);
          if (idst) idst[ow] = at;
        };
        for (int64_t ow = 0; ow < ow_lo; ++ow) border(ow);
        for (int64_t ow = ow_hi; ow < Wo; ++ow) border(ow);
      }
    }
  });
}

template <typename T>
void max_pool2d_impl(const Tensor& x, Tensor& out, Tensor& indices, const Pool2dParams& p) {
  using A = opmath_t<T>;
  const PoolGeom g = pool_geom(x.shape(), out.shape());
  const T* xp = x.data_ptr<T>();
  T* op = out.data_ptr<T>();
  int64_t* ip = indices.defined() ? indices.data_ptr<int64_t>() : nullptr;  // none: inference
  const int64_t kh = p.kernel[0], kw = p.kernel[1], sh = p.stride[0], sw = p.stride[1];
  const int64_t ph = p.padding[0], pw = p.padding[1], dh = p.dilation[0], dw = p.dilation[1];
  // Unit dilation (MNIST's 2x2/2, ResNet's 3x3/2 padding 1, most CNNs): vectorised sweeps.
  if (dh == 1 && dw == 1) {
    max_pool2d_unit_dilation<T>(xp, op, ip, g, p);
    return;
  }
  for_planes(g.planes, g.Ho * g.Wo * kh * kw, [&](int64_t begin, int64_t end) {
    for (int64_t pl = begin; pl < end; ++pl) {
      const T* src = xp + pl * g.H * g.W;
      T* dst = op + pl * g.Ho * g.Wo;
      int64_t* idst = ip ? ip + pl * g.Ho * g.Wo : nullptr;
      for (int64_t oh = 0; oh < g.Ho; ++oh) {
        int64_t ih0 = oh * sh - ph;
        const int64_t ih1 = std::min(ih0 + (kh - 1) * dh + 1, g.H);
        while (ih0 < 0) ih0 += dh;
        for (int64_t ow = 0; ow < g.Wo; ++ow) {
          int64_t iw0 = ow * sw - pw;
          const int64_t iw1 = std::min(iw0 + (kw - 1) * dw + 1, g.W);
          while (iw0 < 0) iw0 += dw;
          const auto [best, at] = window_max<A>(src, g.W, ih0, ih1, dh, iw0, iw1, dw);
          dst[oh * g.Wo + ow] = T(best);
          if (idst) idst[oh * g.Wo + ow] = at;
        }
      }
    }
  });
}

template <typename T>
void max_pool2d_backward_impl(const Tensor& grad_out, const Tensor& indices, Tensor& grad_in) {
  using A = opmath_t<T>;
  const PoolGeom g = pool_geom(grad_in.shape(), grad_out.shape());
  const T* gp = grad_out.data_ptr<T>();
  const int64_t* ip = indices.data_ptr<int64_t>();
  T* dp = grad_in.data_ptr<T>();
  const int64_t HW = g.H * g.W, L = g.Ho * g.Wo;
  std::atomic<bool> bad{false};
  for_planes(g.planes, HW + L, [&](int64_t begin, int64_t end) {
    std::vector<A> acc(static_cast<size_t>(HW));
    for (int64_t pl = begin; pl < end; ++pl) {
      std::fill(acc.begin(), acc.end(), A(0));
      const T* gs = gp + pl * L;
      const int64_t* is = ip + pl * L;
      for (int64_t k = 0; k < L; ++k) {
        const int64_t i = is[k];
        if (i < 0 || i >= HW) {
          bad = true;
          continue;
        }
        acc[size_t(i)] += static_cast<A>(gs[k]);
      }
      T* d = dp + pl * HW;
      for (int64_t i = 0; i < HW; ++i) d[i] = T(acc[size_t(i)]);
    }
  });
  MINIDL_CHECK(!bad, "op `max_pool2d_backward`: an index is out of range for input planes of ",
               "size ", g.H, " x ", g.W, " (indices of shape ", indices.shape_str(), ")");
}

// Window of output (oh, ow) clipped to the input, and its divisor, as PyTorch's avg_pool2d.
struct AvgWindow {
  int64_t h0, h1, w0, w1;
  int64_t divisor;
};

inline AvgWindow avg_window(int64_t oh, int64_t ow, const PoolGeom& g, const Pool2dParams& p) {
  int64_t h0 = oh * p.stride[0] - p.padding[0], w0 = ow * p.stride[1] - p.padding[1];
  int64_t h1 = std::min(h0 + p.kernel[0], g.H + p.padding[0]);
  int64_t w1 = std::min(w0 + p.kernel[1], g.W + p.padding[1]);
  const int64_t pool_size = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, g.H);
  w1 = std::min(w1, g.W);
  int64_t div = p.divisor_override    ? p.divisor_override
                : p.count_include_pad ? pool_size
                                      : (h1 - h0) * (w1 - w0);
  return {h0, h1, w0, w1, div};
}

template <typename T>
void avg_pool2d_impl(const Tensor& x, Tensor& out, const Pool2dParams& p) {
  using A = opmath_t<T>;
  const PoolGeom g = pool_geom(x.shape(), out.shape());
  const T* xp = x.data_ptr<T>();
  T* op = out.data_ptr<T>();
  for_planes(g.planes, g.Ho * g.Wo * p.kernel[0] * p.kernel[1], [&](int64_t begin, int64_t end) {
    for (int64_t pl = begin; pl < end; ++pl) {
      const T* src = xp + pl * g.H * g.W;
      T* dst = op + pl * g.Ho * g.Wo;
      for (int64_t oh = 0; oh < g.Ho; ++oh) {
        for (int64_t ow = 0; ow < g.Wo; ++ow) {
          const AvgWindow win = avg_window(oh, ow, g, p);
          if (win.h0 >= win.h1 || win.w0 >= win.w1) {
            dst[oh * g.Wo + ow] = T(0);
            continue;
          }
          A sum = 0;
          for (int64_t ih = win.h0; ih < win.h1; ++ih)
            for (int64_t iw = win.w0; iw < win.w1; ++iw) sum += static_cast<A>(src[ih * g.W + iw]);
          dst[oh * g.Wo + ow] = T(sum / A(win.divisor));
        }
      }
    }
  });
}

template <typename T>
void avg_pool2d_backward_impl(const Tensor& grad_out, Tensor& grad_in, const Pool2dParams& p) {
  using A = opmath_t<T>;
  const PoolGeom g = pool_geom(grad_in.shape(), grad_out.shape());
  const T* gp = grad_out.data_ptr<T>();
  T* dp = grad_in.data_ptr<T>();
  const int64_t HW = g.H * g.W, L = g.Ho * g.Wo;
  for_planes(g.planes, L * p.kernel[0] * p.kernel[1] + HW, [&](int64_t begin, int64_t end) {
    std::vector<A> acc(static_cast<size_t>(HW));
    for (int64_t pl = begin; pl < end; ++pl) {
      std::fill(acc.begin(), acc.end(), A(0));
      const T* gs = gp + pl * L;
      for (int64_t oh = 0; oh < g.Ho; ++oh) {
        for (int64_t ow = 0; ow < g.Wo; ++ow) {
          const AvgWindow win = avg_window(oh, ow, g, p);
          const A v = static_cast<A>(gs[oh * g.Wo + ow]) / A(win.divisor);
          for (int64_t ih = win.h0; ih < win.h1; ++ih)
            for (int64_t iw = win.w0; iw < win.w1; ++iw) acc[size_t(ih * g.W + iw)] += v;
        }
      }
      T* d = dp + pl * HW;
      for (int64_t i = 0; i < HW; ++i) d[i] = T(acc[size_t(i)]);
    }
  });
}

void max_pool2d_kernel(const Tensor& x, Tensor& out, Tensor& indices, const Pool2dParams& p) {
  dispatch_floating(x.dtype(), "max_pool2d",
                    [&]<typename T>() { max_pool2d_impl<T>(x, out, indices, p); });
}

void max_pool2d_backward_kernel(const Tensor& grad_out, const Tensor& indices, Tensor& grad_in,
                                const Pool2dParams&) {
  dispatch_floating(grad_out.dtype(), "max_pool2d_backward",
                    [&]<typename T>() { max_pool2d_backward_impl<T>(grad_out, indices, grad_in); });
}

void avg_pool2d_kernel(const Tensor& x, Tensor& out, const Pool2dParams& p) {
  dispatch_floating(x.dtype(), "avg_pool2d", [&]<typename T>() { avg_pool2d_impl<T>(x, out, p); });
}

void avg_pool2d_backward_kernel(const Tensor& grad_out, Tensor& grad_in, const Pool2dParams& p) {
  dispatch_floating(grad_out.dtype(), "avg_pool2d_backward",
                    [&]<typename T>() { avg_pool2d_backward_impl<T>(grad_out, grad_in, p); });
}

}  // namespace

void register_pool_kernels() {
  register_kernel<Op::max_pool2d>(DeviceType::cpu, max_pool2d_kernel);
  register_kernel<Op::max_pool2d_backward>(DeviceType::cpu, max_pool2d_backward_kernel);
  register_kernel<Op::avg_pool2d>(DeviceType::cpu, avg_pool2d_kernel);
  register_kernel<Op::avg_pool2d_backward>(DeviceType::cpu, avg_pool2d_backward_kernel);
}

}  // namespace minidl::cpu
