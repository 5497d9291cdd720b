// CPU kernels: layer_norm and add_layer_norm (a residual add and the layer norm of its sum in one
// pass, the normalised rows written in a 16-bit dtype where asked), forward and backward. One row
// body serves both ops, so the fused op rounds exactly as add, layer_norm and a cast would.
#include <cmath>
#include <vector>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/norm_common.h"
#include "tensor/mixed_dtype.h"

namespace minidl::cpu::norm_detail {
namespace {

// Rows of s = x + y (yp == nullptr: s = x, sp unused) normalised into out (dtype O); T is x's and
// the sum's dtype. x, y, s, out:[R,D] contiguous; mean, rstd:[R].
template <typename T, typename Y, typename O>
void ln_forward_rows(const T* xp, const Y* yp, T* sp, O* op, stat_t<T>* mp, stat_t<T>* rp,
                     const Tensor& w, const Tensor& b, int64_t R, int64_t D, double eps) {
  using A = opmath_t<T>;
  using S = stat_t<T>;
  const std::vector<A> wv = load_vec<A>(w, D, A(1)), bv = load_vec<A>(b, D, A(0));
  const A* wd = wv.data();
  const A* bd = bv.data();
  parallel_for(R, rows_grain(D), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = xp + r * D;
      if (yp != nullptr) {  // the sum rounded as add() rounds it, then normalised as stored
        const Y* yr = yp + r * D;
        T* sr = sp + r * D;
        for (int64_t j = 0; j < D; ++j) sr[j] = T(A(xr[j]) + A(opmath_t<Y>(yr[j])));
        xr = sr;
      }
      O* orow = op + r * D;
      const double m = lane_sum(D, [&](int64_t j) { return double(A(xr[j])); }) / double(D);
      const double var = lane_sum(D,
                                  [&](int64_t j) {
                                    const double d = double(A(xr[j])) - m;
                                    return d * d;
                                  }) /
                         double(D);
      const double rs = 1.0 / std::sqrt(var + eps);
      mp[r] = S(m);
      rp[r] = S(rs);
      const A ma = A(m), ra = A(rs);
      for (int64_t j = 0; j < D; ++j) orow[j] = O((A(xr[j]) - ma) * ra * wd[j] + bd[j]);
    }
  });
}

// Backward rows: v = rstd * (gw - c1 - xh * c2) with gw = g * w, xh = (s - mean) * rstd,
// c1 = mean(gw), c2 = mean(gw * xh); grad_x = v (+ grad_sum, added as the autograd engine adds
// two gradients), grad_y = grad_x as Y. g (dtype G) is out's gradient; gsp, gyp may be null.
template <typename T, typename G, typename Y>
void ln_backward_rows(const G* gp, const T* gsp, const T* xp, const stat_t<T>* mp,
                      const stat_t<T>* rp, const Tensor& w, T* gxp, Y* gyp, Tensor& grad_w,
                      Tensor& grad_b, int64_t R, int64_t D) {
  using A = opmath_t<T>;
  const bool want_wb = grad_w.defined() || grad_b.defined();
  const std::vector<A> wv = load_vec<A>(w, D, A(1));
  const A* wd = wv.data();
  // Fixed row chunks (independent of the thread count) with [D] partial sums for grad_w/b.
  const int64_t rows_per_chunk = rows_grain(D);
  const int64_t nchunks = R == 0 ? 0 : (R + rows_per_chunk - 1) / rows_per_chunk;
  std::vector<double> pw(want_wb ? size_t(nchunks * D) : 0, 0.0);
  std::vector<double> pb(want_wb ? size_t(nchunks * D) : 0, 0.0);
  parallel_for(nchunks, 1, [&](int64_t k0, int64_t k1) {
    std::vector<A> gw(static_cast<size_t>(D)), xh(static_cast<size_t>(D));
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t rend = std::min(R, (k + 1) * rows_per_chunk);
      for (int64_t r = k * rows_per_chunk; r < rend; ++r) {
        const T* xr = xp + r * D;
        const G* gr = gp + r * D;
        T* gxr = gxp + r * D;
        const A m = A(mp[r]), rs = A(rp[r]);
        for (int64_t j = 0; j < D; ++j) {
          xh[j] = (A(xr[j]) - m) * rs;
          gw[j] = A(opmath_t<G>(gr[j])) * wd[j];
        }
        const double s1 = lane_sum(D, [&](int64_t j) { return double(gw[j]); });
        const double s2 = lane_sum(D, [&](int64_t j) { return double(gw[j]) * double(xh[j]); });
        const A c1 = A(s1 / double(D)), c2 = A(s2 / double(D));
        for (int64_t j = 0; j < D; ++j) gxr[j] = T(rs * (gw[j] - c1 - xh[j] * c2));
        // A loop of its own: in one expression the compiler may fuse rs * (...) + gs into an
        // FMA (C++ allows contraction), which rounds once where add() rounds twice.
        if (gsp != nullptr) {
          const T* gsr = gsp + r * D;
          for (int64_t j = 0; j < D; ++j) gxr[j] = T(A(gxr[j]) + A(gsr[j]));
        }
        if (gyp != nullptr) {
          Y* gyr = gyp + r * D;
          for (int64_t j = 0; j < D; ++j) gyr[j] = Y(A(gxr[j]));
        }
        if (want_wb) {
          double* pwk = pw.data() + k * D;
          double* pbk = pb.data() + k * D;
          for (int64_t j = 0; j < D; ++j) {
            const double g = double(A(opmath_t<G>(gr[j])));
            pwk[j] += g * double(xh[j]);
            pbk[j] += g;
          }
        }
      }
    }
  });
  if (!want_wb) return;
  std::vector<double> sw(size_t(D), 0.0), sb(size_t(D), 0.0);
  for (int64_t k = 0; k < nchunks; ++k)
    for (int64_t j = 0; j < D; ++j) {
      sw[j] += pw[k * D + j];
      sb[j] += pb[k * D + j];
    }
  if (grad_w.defined()) store_vec(grad_w, sw);
  if (grad_b.defined()) store_vec(grad_b, sb);
}

// x, out:[R,D] contiguous; mean, rstd:[R]
void layer_norm_kernel(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& out, Tensor& mean,
                       Tensor& rstd, int64_t D, double eps) {
  dispatch_floating(x.dtype(), "layer_norm", [&]<typename T>() {
    ln_forward_rows<T, T, T>(x.data_ptr<T>(), nullptr, nullptr, out.data_ptr<T>(),
                             mean.data_ptr<stat_t<T>>(), rstd.data_ptr<stat_t<T>>(), w, b,
                             x.size(0), D, eps);
  });
}

// grad_out, x, grad_x:[R,D] contiguous; mean, rstd:[R]; grad_w, grad_b:[D] or undefined.
void layer_norm_backward_kernel(const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                                const Tensor& rstd, const Tensor& w, Tensor& grad_x, Tensor& grad_w,
                                Tensor& grad_b, int64_t D) {
  dispatch_floating(x.dtype(), "layer_norm_backward", [&]<typename T>() {
    ln_backward_rows<T, T, T>(grad_out.data_ptr<T>(), nullptr, x.data_ptr<T>(),
                              mean.data_ptr<stat_t<T>>(), rstd.data_ptr<stat_t<T>>(), w,
                              grad_x.data_ptr<T>(), nullptr, grad_w, grad_b, x.size(0), D);
  });
}

// x, y, sum, out:[R,D] contiguous (y, sum undefined: out = layer_norm(x)); mean, rstd:[R].
void add_layer_norm_kernel(const Tensor& x, const Tensor& y, const Tensor& w, const Tensor& b,
                           Tensor& sum, Tensor& out, Tensor& mean, Tensor& rstd, int64_t D,
                           double eps) {
  const DType yd = y.defined() ? y.dtype() : x.dtype();
  dispatch_float_and_twins(x.dtype(), yd, out.dtype(), "add_layer_norm", "the residual's dtype",
                           "out_dtype", [&]<typename T, typename Y, typename O>() {
                             ln_forward_rows<T, Y, O>(
                                 x.data_ptr<T>(), y.defined() ? y.data_ptr<Y>() : nullptr,
                                 y.defined() ? sum.data_ptr<T>() : nullptr, out.data_ptr<O>(),
                                 mean.data_ptr<stat_t<T>>(), rstd.data_ptr<stat_t<T>>(), w, b,
                                 x.size(0), D, eps);
                           });
}

// grad_out:[R,D] (out's dtype), grad_sum, s, grad_x:[R,D] (s's dtype), grad_y:[R,D] (its own
// dtype); grad_sum, grad_y, grad_w, grad_b may be undefined.
void add_layer_norm_backward_kernel(const Tensor& grad_out, const Tensor& grad_sum, const Tensor& s,
                                    const Tensor& mean, const Tensor& rstd, const Tensor& w,
                                    Tensor& grad_x, Tensor& grad_y, Tensor& grad_w, Tensor& grad_b,
                                    int64_t D) {
  const DType yd = grad_y.defined() ? grad_y.dtype() : s.dtype();
  dispatch_float_and_twins(
      s.dtype(), grad_out.dtype(), yd, "add_layer_norm_backward", "grad_out's dtype",
      "the residual's dtype", [&]<typename T, typename G, typename Y>() {
        ln_backward_rows<T, G, Y>(
            grad_out.data_ptr<G>(), grad_sum.defined() ? grad_sum.data_ptr<T>() : nullptr,
            s.data_ptr<T>(), mean.data_ptr<stat_t<T>>(), rstd.data_ptr<stat_t<T>>(), w,
            grad_x.data_ptr<T>(), grad_y.defined() ? grad_y.data_ptr<Y>() : nullptr, grad_w, grad_b,
            s.size(0), D);
      });
}

}  // namespace

void register_layer_norm_kernels() {
  register_kernel<Op::layer_norm>(DeviceType::cpu, layer_norm_kernel);
  register_kernel<Op::layer_norm_backward>(DeviceType::cpu, layer_norm_backward_kernel);
  register_kernel<Op::add_layer_norm>(DeviceType::cpu, add_layer_norm_kernel);
  register_kernel<Op::add_layer_norm_backward>(DeviceType::cpu, add_layer_norm_backward_kernel);
}

}  // namespace minidl::cpu::norm_detail
