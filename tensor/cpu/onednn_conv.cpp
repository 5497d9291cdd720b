// conv2d forward, backward-data and backward-weights through oneDNN (f32, bf16 with f32
// accumulation; bf16 on f32 kernels where the CPU lacks native bf16) on minidl's NCHW / OIHW
// tensors: blocked layouts with reorders, a chunk of images at a time (bounded temporaries).
#ifdef MINIDL_WITH_ONEDNN
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "tensor/cpu/onednn_internal.h"
#include "tensor/ops.h"

namespace minidl::cpu::onednn {
namespace {

using dnnl::algorithm;
using dnnl::prop_kind;
using md = dnnl::memory::desc;
using dims_t = dnnl::memory::dims;

// Blocked layouts chosen by oneDNN (format_tag::any, reorders around each call) instead of the
// plain ones: 2x (f32) to 4-8x (bf16) faster on the MNIST conv2 layer (bench/results), whose
// plain NCHW case oneDNN 2.6 runs as im2col + GEMM. MINIDL_ONEDNN_LAYOUT=plain turns it off.
bool blocked_layouts() {
  static const bool on = [] {
    const char* s = std::getenv("MINIDL_ONEDNN_LAYOUT");
    return !(s && std::strcmp(s, "plain") == 0);
  }();
  return on;
}

// Images per primitive call with blocked layouts: the reordered input and output of one chunk
// take at most about this many bytes (one chunk for the MNIST batch of 64 in bf16 and f32, also
// when bf16 runs on f32 kernels) (the temporaries do not grow with the batch).
constexpr int64_t kChunkBytes = int64_t(16) << 20;

// One convolution's descriptors in minidl's layouts (user) and the primitive's request (any or
// user), with oneDNN's geometry parameters (dilation counted from 0).
struct Geo {
  dims_t x, w, out, bias, strides, dil, pl, pr;
  int64_t N, Cg, Og, area, G, C;
  // dt: the tensors' type; pdt: the primitive's (f32 for bf16 tensors on f32 kernels, whose
  // reorders convert); wdt / pwdt: the weight gradient's, in the tensor handed to oneDNN (f32
  // when chunks sum) and in the primitive.
  dnnl::memory::data_type dt, pdt, wdt, pwdt;
  bool blocked;

  // Elements of one image of x and of out; images per chunk; the geometry of n images.
  int64_t x_image() const { return x[1] * x[2] * x[3]; }
  int64_t out_image() const { return out[1] * out[2] * out[3]; }
  int64_t chunk() const {
    if (!blocked) return N;
    const int64_t per = (x_image() + out_image()) * int64_t(dnnl::memory::data_type_size(pdt));
    return std::clamp<int64_t>(kChunkBytes / std::max<int64_t>(per, 1), 1, N);
  }
  Geo images(int64_t n) const {
    Geo g = *this;
    g.x[0] = g.out[0] = g.N = n;
    return g;
  }
  md user_dw() const { return plain(w, wdt); }
  md want_dw() const {
    return blocked ? md(w, pwdt, dnnl::memory::format_tag::any) : plain(w, pwdt);
  }

  md user_x() const { return plain(x, dt); }
  md user_w() const { return plain(w, dt); }
  md user_out() const { return plain(out, dt); }
  md user_bias() const { return plain(bias, dt); }
  md want_bias() const { return plain(bias, pdt); }
  md want(const dims_t& d) const {
    return blocked ? md(d, pdt, dnnl::memory::format_tag::any) : plain(d, pdt);
  }
  // The weight gradient summed over chunks: f32 in the tensor and so in the primitive.
  void sum_in_f32() { wdt = pwdt = dnnl::memory::data_type::f32; }
  Key key(int op, bool has_bias) const {
    Key k;
    k.add({op, int64_t(dt), int64_t(pdt), int64_t(wdt), int64_t(pwdt), int64_t(has_bias),
           int64_t(blocked)})
        .add(x)
        .add(w)
        .add(out)
        .add(strides)
        .add(dil)
        .add(pl)
        .add(pr);
    return k;
  }
  // The shape-class dims of auto_prefers_onednn.
  std::vector<int64_t> cls() const { return {N, Cg, Og, area, int64_t(G == C && G > 1)}; }
};

Geo make_geo(const Shape& x, const Shape& w, const Shape& out, const Conv2dParams& p, DType dt) {
  Geo g;
  g.dt = g.wdt = *to_dnnl(dt);
  g.pdt = g.pwdt = dt == kBFloat16 && onednn_bf16_in_f32() ? dnnl::memory::data_type::f32 : g.dt;
  g.blocked = blocked_layouts();
  g.N = x[0];
  g.C = x[1];
  g.G = p.groups;
  g.Cg = w[1];
  g.Og = w[0] / p.groups;
  g.area = w[2] * w[3];
  g.x = {x[0], x[1], x[2], x[3]};
  g.out = {out[0], out[1], out[2], out[3]};
  g.w = p.groups > 1 ? dims_t{p.groups, g.Og, w[1], w[2], w[3]} : dims_t{w[0], w[1], w[2], w[3]};
  g.bias = {w[0]};
  g.strides = {p.stride[0], p.stride[1]};
  g.dil = {p.dilation[0] - 1, p.dilation[1] - 1};
  g.pl = {p.padding[0], p.padding[1]};
  g.pr = {p.padding[0], p.padding[1]};
  return g;
}

dnnl::convolution_forward::primitive_desc forward_pd(const Geo& g, bool has_bias) {
  using cf = dnnl::convolution_forward;
  const md x = g.want(g.x), w = g.want(g.w), y = g.want(g.out);
  if (has_bias)
    return cf::primitive_desc(cf::desc(prop_kind::forward_training, algorithm::convolution_direct,
                                       x, w, g.want_bias(), y, g.strides, g.dil, g.pl, g.pr),
                              default_attr(), engine());
  return cf::primitive_desc(cf::desc(prop_kind::forward_training, algorithm::convolution_direct, x,
                                     w, y, g.strides, g.dil, g.pl, g.pr),
                            default_attr(), engine());
}

// The data of t, `bytes` in.
const void* offset(const Tensor& t, int64_t bytes) {
  return static_cast<const char*>(t.data_ptr()) + bytes;
}

// Plain, contiguous, one dtype, nothing empty: the cases handed to oneDNN.
bool eligible(std::initializer_list<const Tensor*> ts, DType dt) {
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    if (t->dtype() != dt || !t->is_contiguous() || t->numel() == 0) return false;
  }
  return true;
}

}  // namespace

bool conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
            const Conv2dParams& p) {
  const DType dt = x.dtype();
  if (!to_dnnl(dt) || !eligible({&x, &w, &bias, &out}, dt)) return false;
  const Geo g = make_geo(x.shape(), w.shape(), out.shape(), p, dt);
  if (!wanted(OpClass::conv_forward, dt, g.cls().data())) return false;
  const bool has_bias = bias.defined();
  static PrimCache cache;
  const int64_t esize = int64_t(x.element_size()), nc = g.chunk();
  for (int64_t n0 = 0; n0 < g.N; n0 += nc) {
    const Geo gc = g.images(std::min(nc, g.N - n0));
    auto prim = cache.get(gc.key(0, has_bias), [&] {
      auto pd = forward_pd(gc, has_bias);
      return std::make_shared<const Prim>(Prim{dnnl::convolution_forward(pd), pd});
    });
    if (!prim) return false;  // unimplemented: the same for every chunk, so at n0 == 0
    std::vector<Arg> args = {
        {DNNL_ARG_SRC, gc.user_x(), offset(x, n0 * g.x_image() * esize)},
        {DNNL_ARG_WEIGHTS, gc.user_w(), w.data_ptr()},
        {DNNL_ARG_DST, gc.user_out(), offset(out, n0 * g.out_image() * esize), true}};
    if (has_bias) args.push_back({DNNL_ARG_BIAS, gc.user_bias(), bias.data_ptr()});
    execute(*prim, args);
  }
  return true;
}

bool conv2d_backward_input(const Tensor& grad_out, const Tensor& w, Tensor& grad_x,
                           const Conv2dParams& p) {
  const DType dt = grad_out.dtype();
  if (!to_dnnl(dt) || !eligible({&grad_out, &w, &grad_x}, dt)) return false;
  const Geo g = make_geo(grad_x.shape(), w.shape(), grad_out.shape(), p, dt);
  if (!wanted(OpClass::conv_backward_input, dt, g.cls().data())) return false;
  static PrimCache cache;
  const int64_t esize = int64_t(grad_out.element_size()), nc = g.chunk();
  for (int64_t n0 = 0; n0 < g.N; n0 += nc) {
    const Geo gc = g.images(std::min(nc, g.N - n0));
    auto prim = cache.get(gc.key(1, false), [&] {
      using cbd = dnnl::convolution_backward_data;
      auto hint = forward_pd(gc, false);
      cbd::primitive_desc pd(cbd::desc(algorithm::convolution_direct, gc.want(gc.x), gc.want(gc.w),
                                       gc.want(gc.out), gc.strides, gc.dil, gc.pl, gc.pr),
                             default_attr(), engine(), hint);
      return std::make_shared<const Prim>(Prim{cbd(pd), pd});
    });
    if (!prim) return false;
    execute(*prim,
            {{DNNL_ARG_DIFF_DST, gc.user_out(), offset(grad_out, n0 * g.out_image() * esize)},
             {DNNL_ARG_WEIGHTS, gc.user_w(), w.data_ptr()},
             {DNNL_ARG_DIFF_SRC, gc.user_x(), offset(grad_x, n0 * g.x_image() * esize), true}});
  }
  return true;
}

bool conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, Tensor& grad_w,
                            const Conv2dParams& p) {
  const DType dt = grad_out.dtype();
  if (!to_dnnl(dt) || !eligible({&grad_out, &x, &grad_w}, dt)) return false;
  Geo g = make_geo(x.shape(), grad_w.shape(), grad_out.shape(), p, dt);
  if (!wanted(OpClass::conv_backward_weight, dt, g.cls().data())) return false;
  static PrimCache cache;
  const int64_t esize = int64_t(x.element_size()), nc = g.chunk();
  const bool chunked = nc < g.N;
  // Several chunks: each one's gradient in f32, summed in f32, rounded once at the end.
  Tensor total, part;
  if (chunked) {
    g.sum_in_f32();
    total = empty(grad_w.shape(), kFloat32, kCPU);
    part = empty(grad_w.shape(), kFloat32, kCPU);
  }
  for (int64_t n0 = 0; n0 < g.N; n0 += nc) {
    const Geo gc = g.images(std::min(nc, g.N - n0));
    auto prim = cache.get(gc.key(2, false), [&] {
      using cbw = dnnl::convolution_backward_weights;
      auto hint = forward_pd(gc, false);
      cbw::primitive_desc pd(cbw::desc(algorithm::convolution_direct, gc.want(gc.x), gc.want_dw(),
                                       gc.want(gc.out), gc.strides, gc.dil, gc.pl, gc.pr),
                             default_attr(), engine(), hint);
      return std::make_shared<const Prim>(Prim{cbw(pd), pd});
    });
    if (!prim) return false;
    Tensor& dst = !chunked ? grad_w : n0 == 0 ? total : part;
    execute(*prim,
            {{DNNL_ARG_SRC, gc.user_x(), offset(x, n0 * g.x_image() * esize)},
             {DNNL_ARG_DIFF_DST, gc.user_out(), offset(grad_out, n0 * g.out_image() * esize)},
             {DNNL_ARG_DIFF_WEIGHTS, gc.user_dw(), dst.data_ptr(), true}});
    if (chunked && n0 > 0) {
      float* t = total.data_ptr<float>();
      const float* q = part.data_ptr<float>();
      for (int64_t i = 0, n = total.numel(); i < n; ++i) t[i] += q[i];
    }
  }
  if (chunked) native::copy_(grad_w, total);
  return true;
}

}  // namespace minidl::cpu::onednn
#endif  // MINIDL_WITH_ONEDNN
