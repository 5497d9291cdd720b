// The gloo backend's transport: tensors on the wire (staging through pinned memory, half-precision
// reduction, avg) and the allreduce every reducing collective uses (parallel/gloo/transport.h).
#include "parallel/gloo/transport.h"

#if MINIDL_WITH_GLOO
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/math.h>

#include "tensor/pinned.h"

namespace minidl::dist {

namespace gloo_wire {
namespace {

using Func = gloo::AllreduceOptions::Func;
using RawFunc = void (*)(void*, const void*, const void*, size_t);

template <typename T>
constexpr bool is_half_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Element-wise reduction of 16-bit floats: computed in f32, rounded once per pair.
template <typename H, ReduceOp op>
void half_reduce(void* c, const void* a, const void* b, size_t n) {
  H* out = static_cast<H*>(c);
  const H* x = static_cast<const H*>(a);
  const H* y = static_cast<const H*>(b);
  for (size_t i = 0; i < n; ++i) {
    const float u = float(x[i]), v = float(y[i]);
    float r = u + v;
    if constexpr (op == ReduceOp::max) r = (u != u || u > v) ? u : v;
    if constexpr (op == ReduceOp::min) r = (u != u || u < v) ? u : v;
    out[i] = H(r);
  }
}

template <typename T>
RawFunc reduce_func(ReduceOp op) {
  if constexpr (is_half_v<T>) {
    if (op == ReduceOp::max) return &half_reduce<T, ReduceOp::max>;
    if (op == ReduceOp::min) return &half_reduce<T, ReduceOp::min>;
    return &half_reduce<T, ReduceOp::sum>;
  } else {
    if (op == ReduceOp::max) return &gloo::max<T>;
    if (op == ReduceOp::min) return &gloo::min<T>;
    return &gloo::sum<T>;
  }
}

// avg = sum / size; integers use floor division (like torch.div(rounding_mode="floor")).
void divide_by(Tensor& wire, int size) {
  visit_wire(wire.dtype(), [&]<typename T>() {
    T* p = wire.data_ptr<T>();
    const int64_t n = wire.numel();
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (is_half_v<T>) {
        p[i] = T(float(p[i]) / float(size));
      } else if constexpr (std::is_floating_point_v<T>) {
        p[i] /= T(size);
      } else {
        T q = T(p[i] / T(size));
        if constexpr (std::is_signed_v<T>)
          if (p[i] % T(size) != 0 && p[i] < 0) --q;
        p[i] = q;
      }
    }
  });
}

}  // namespace

Tensor to_wire(const Tensor& t) {
  if (t.is_cpu()) return t;
  Tensor host = empty_pinned(t.shape(), t.dtype());
  host.copy_(t);
  return host;
}

void from_wire(Tensor& t, const Tensor& wire) {
  if (!wire.is_same(t)) t.copy_(wire);
}

void allreduce_wire(const std::shared_ptr<gloo::Context>& ctx, Tensor& wire, ReduceOp op,
                    uint32_t tag, std::chrono::milliseconds timeout) {
  if (wire.numel() > 0) {
    gloo::AllreduceOptions opts(ctx);
    opts.setTag(tag);
    opts.setTimeout(timeout);
    visit_wire(wire.dtype(), [&]<typename T>() {
      opts.setOutput(wire.data_ptr<T>(), size_t(wire.numel()));
      opts.setReduceFunction(Func(reduce_func<T>(op)));
    });
    gloo::allreduce(opts);
  }
  if (op == ReduceOp::avg) divide_by(wire, ctx->size);
}

void reduce_scatter_wire(const std::shared_ptr<gloo::Context>& ctx, const Tensor& in, Tensor& out,
                         ReduceOp op, uint32_t tag, std::chrono::milliseconds timeout) {
  const int64_t n = out.numel();
  const int size = ctx->size;
  if (n > 0) {
    // recv:[size, n]: row r is rank r's piece for this rank; each rank sends (size-1)/size of
    // its input once, as a ring reduce-scatter does, instead of an allreduce's 2(size-1)/size.
    Tensor recv = empty({int64_t(size) * n}, in.dtype());
    gloo::AlltoallOptions opts(ctx);
    opts.setTag(tag);
    opts.setTimeout(timeout);
    visit_wire(in.dtype(), [&]<typename T>() {
      opts.setInput(const_cast<T*>(in.data_ptr<T>()), size_t(in.numel()));
      opts.setOutput(recv.data_ptr<T>(), size_t(recv.numel()));
    });
    gloo::alltoall(opts);
    visit_wire(in.dtype(), [&]<typename T>() {
      const RawFunc reduce = reduce_func<T>(op);
      const T* rows = recv.data_ptr<T>();
      T* dst = out.data_ptr<T>();
      std::copy(rows, rows + n, dst);
      for (int r = 1; r < size; ++r) reduce(dst, dst, rows + int64_t(r) * n, size_t(n));
    });
  }
  if (op == ReduceOp::avg) divide_by(out, size);
}

}  // namespace gloo_wire
}  // namespace minidl::dist
#endif  // MINIDL_WITH_GLOO
