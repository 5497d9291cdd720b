// Naive f64 references of conv2d, max_pool2d and avg_pool2d (forward, and the input and weight
// gradients for an upstream gradient) that tests/test_conv_pool.cpp checks every dtype against.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "minidl.h"

namespace conv_pool_reference {
using minidl::Conv2dParams;
using minidl::Pool2dParams;
using minidl::Shape;

struct ConvRef {
  Shape out_shape;
  std::vector<double> out, grad_x, grad_w;
};

inline int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

// out = conv(x, w) + b; grad_x, grad_w for upstream g (g may be empty: grads skipped).
inline ConvRef conv_ref(const std::vector<double>& x, const Shape& xs, const std::vector<double>& w,
                        const Shape& ws, const std::vector<double>& b, const std::vector<double>& g,
                        const Conv2dParams& p) {
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], O = ws[0], kh = ws[2], kw = ws[3];
  const int64_t Ho = conv_out(H, kh, p.stride[0], p.padding[0], p.dilation[0]);
  const int64_t Wo = conv_out(W, kw, p.stride[1], p.padding[1], p.dilation[1]);
  const int64_t Cg = C / p.groups, Og = O / p.groups;
  ConvRef r{{N, O, Ho, Wo}, {}, std::vector<double>(x.size()), std::vector<double>(w.size())};
  r.out.assign(size_t(N * O * Ho * Wo), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const size_t oi = size_t(((n * O + o) * Ho + oh) * Wo + ow);
          double acc = b.empty() ? 0.0 : b[size_t(o)];
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                int64_t ih = oh * p.stride[0] - p.padding[0] + i * p.dilation[0];
                int64_t iw = ow * p.stride[1] - p.padding[1] + j * p.dilation[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const int64_t ci = (o / Og) * Cg + c;
                const size_t xi = size_t(((n * C + ci) * H + ih) * W + iw);
                const size_t wi = size_t(((o * Cg + c) * kh + i) * kw + j);
                acc += x[xi] * w[wi];
                if (!g.empty()) {
                  r.grad_x[xi] += g[oi] * w[wi];
                  r.grad_w[wi] += g[oi] * x[xi];
                }
              }
          r.out[oi] = acc;
        }
  return r;
}

inline int64_t pool_out(int64_t in, int64_t k, int64_t p, int64_t s, int64_t d, bool ceil_mode) {
  int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  int64_t o = num / s + 1;  // num >= 0 in the configs used here
  if (ceil_mode && (o - 1) * s >= in + p) --o;
  return o;
}

struct PoolRef {
  Shape out_shape;
  std::vector<double> out, grad_x;
  std::vector<int64_t> idx;
};

inline PoolRef max_pool_ref(const std::vector<double>& x, const Shape& xs,
                            const std::vector<double>& g, const Pool2dParams& p) {
  const int64_t P = xs[0] * xs[1], H = xs[2], W = xs[3];
  const int64_t Ho =
      pool_out(H, p.kernel[0], p.padding[0], p.stride[0], p.dilation[0], p.ceil_mode);
  const int64_t Wo =
      pool_out(W, p.kernel[1], p.padding[1], p.stride[1], p.dilation[1], p.ceil_mode);
  PoolRef r{{xs[0], xs[1], Ho, Wo}, {}, std::vector<double>(x.size()), {}};
  for (int64_t pl = 0; pl < P; ++pl)
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow) {
        double best = -std::numeric_limits<double>::infinity();
        int64_t bi = -1;
        for (int64_t i = 0; i < p.kernel[0]; ++i)
          for (int64_t j = 0; j < p.kernel[1]; ++j) {
            int64_t ih = oh * p.stride[0] - p.padding[0] + i * p.dilation[0];
            int64_t iw = ow * p.stride[1] - p.padding[1] + j * p.dilation[1];
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            double v = x[size_t((pl * H + ih) * W + iw)];
            if (bi < 0 || v > best) best = v, bi = ih * W + iw;
          }
        r.out.push_back(best);
        r.idx.push_back(bi);
        if (!g.empty()) r.grad_x[size_t(pl * H * W + bi)] += g[r.out.size() - 1];
      }
  return r;
}

// Divisor: window positions inside the padded input (count_include_pad) or inside the input.
inline PoolRef avg_pool_ref(const std::vector<double>& x, const Shape& xs,
                            const std::vector<double>& g, const Pool2dParams& p) {
  const int64_t P = xs[0] * xs[1], H = xs[2], W = xs[3];
  const int64_t Ho = pool_out(H, p.kernel[0], p.padding[0], p.stride[0], 1, p.ceil_mode);
  const int64_t Wo = pool_out(W, p.kernel[1], p.padding[1], p.stride[1], 1, p.ceil_mode);
  PoolRef r{{xs[0], xs[1], Ho, Wo}, {}, std::vector<double>(x.size()), {}};
  for (int64_t pl = 0; pl < P; ++pl)
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow) {
        double sum = 0;
        int64_t padded = 0, inside = 0;
        std::vector<size_t> cells;
        for (int64_t i = 0; i < p.kernel[0]; ++i)
          for (int64_t j = 0; j < p.kernel[1]; ++j) {
            int64_t ih = oh * p.stride[0] - p.padding[0] + i;
            int64_t iw = ow * p.stride[1] - p.padding[1] + j;
            if (ih < H + p.padding[0] && iw < W + p.padding[1]) ++padded;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            ++inside;
            cells.push_back(size_t((pl * H + ih) * W + iw));
            sum += x[cells.back()];
          }
        double div = p.divisor_override    ? double(p.divisor_override)
                     : p.count_include_pad ? double(padded)
                                           : double(inside);
        r.out.push_back(inside ? sum / div : 0.0);
        if (!g.empty())
          for (size_t c : cells) r.grad_x[c] += g[r.out.size() - 1] / div;
      }
  return r;
}

}  // namespace conv_pool_reference
