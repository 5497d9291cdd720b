// bmm (and so matmul, mm and linear, which lower onto it) through oneDNN's matmul primitive:
// f32, and bf16 operands with f32 accumulation and a bf16 result; linear_bias adds the bias to
// the f32 accumulator (one rounding). Row- or column-major
// operands (transposed views) and broadcast batches (batch stride 0) are passed as strides.
#ifdef MINIDL_WITH_ONEDNN
#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "tensor/cpu/onednn_internal.h"
#include "tensor/ops.h"

namespace minidl::cpu::onednn {
namespace {

using md = dnnl::memory::desc;
using dims_t = dnnl::memory::dims;

// The dims and strides of one [B,R,C] operand as oneDNN sees it (batch 1 when every matrix is
// the same one, which oneDNN broadcasts), or nullopt when no matrix layout fits (the caller
// makes a contiguous copy).
struct Operand {
  dims_t dims, strides;
};

std::optional<Operand> describe(const Tensor& t) {
  const int64_t B = t.size(0), R = t.size(1), C = t.size(2);
  const int64_t sb = t.stride(0), sr = t.stride(1), sc = t.stride(2);
  const bool row = (sc == 1 || C == 1) && (R == 1 || sr >= std::max<int64_t>(C, 1));
  const bool col = !row && (sr == 1 || R == 1) && (C == 1 || sc >= std::max<int64_t>(R, 1));
  if (!row && !col) return std::nullopt;
  const int64_t ld = row ? (R == 1 ? C : sr) : (C == 1 ? R : sc);
  Operand o;
  const bool one = B == 1 || sb == 0;
  const int64_t span = ld * (row ? R : C);
  o.dims = {one ? 1 : B, R, C};
  o.strides = {one ? span : sb, row ? ld : 1, row ? 1 : ld};
  return o;
}

// describe(t), replacing t by a contiguous copy first when its layout does not fit.
std::optional<Operand> describe_or_copy(Tensor& t) {
  std::optional<Operand> o = describe(t);
  if (!o) {
    t = t.contiguous();
    o = describe(t);
  }
  return o;
}

}  // namespace

bool bmm(const Tensor& a, const Tensor& b, Tensor& out) {
  const DType dt = out.dtype();
  if (!to_dnnl(dt) || a.dtype() != dt || b.dtype() != dt) return false;
  if (out.numel() == 0 || a.size(2) == 0 || !out.is_contiguous()) return false;
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  const int64_t cls[4] = {B, M, N, K};
  if (!wanted(OpClass::matmul, dt, cls)) return false;
  const auto ddt = *to_dnnl(dt);

  Tensor ac = a, bc = b;  // contiguous copies only when a layout does not fit
  const std::optional<Operand> oa = describe_or_copy(ac), ob = describe_or_copy(bc);
  MINIDL_CHECK(oa && ob, "bmm (oneDNN): unexpected operand layouts ", a.shape_str(), " and ",
               b.shape_str());
  const md ma(oa->dims, ddt, oa->strides), mb(ob->dims, ddt, ob->strides);
  const md mc = plain({B, M, N}, ddt);

  static PrimCache cache;
  Key key;
  key.add({int64_t(ddt), B, M, N, K}).add(oa->dims).add(oa->strides).add(ob->dims).add(ob->strides);
  auto prim = cache.get(key, [&] {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ma, mb, mc), default_attr(), engine());
    return std::make_shared<const Prim>(Prim{dnnl::matmul(pd), pd});
  });
  if (!prim) return false;
  execute(*prim, {{DNNL_ARG_SRC, ma, ac.data_ptr()},
                  {DNNL_ARG_WEIGHTS, mb, bc.data_ptr()},
                  {DNNL_ARG_DST, mc, out.data_ptr(), true}});
  return true;
}

bool linear_bias(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  const DType dt = out.dtype();
  if (!to_dnnl(dt) || x.dtype() != dt || w.dtype() != dt || bias.dtype() != dt) return false;
  if (out.numel() == 0 || x.size(1) == 0 || !out.is_contiguous() || !bias.is_contiguous())
    return false;
  const int64_t M = out.size(0), N = out.size(1), K = x.size(1);
  const int64_t cls[4] = {1, M, N, K};
  if (!wanted(OpClass::matmul, dt, cls)) return false;
  const auto ddt = *to_dnnl(dt);
  Tensor xc = x.unsqueeze(0), wc = w.t().unsqueeze(0);  // [1,M,K] x [1,K,N]
  const std::optional<Operand> oa = describe_or_copy(xc), ob = describe_or_copy(wc);
  MINIDL_CHECK(oa && ob, "linear (oneDNN): unexpected operand layouts ", x.shape_str(), " and ",
               w.shape_str());
  const md ma(oa->dims, ddt, oa->strides), mb(ob->dims, ddt, ob->strides);
  const md mbias = plain({1, 1, N}, ddt), mc = plain({1, M, N}, ddt);

  static PrimCache cache;
  Key key;
  key.add({int64_t(ddt), M, N, K}).add(oa->strides).add(ob->strides);
  auto prim = cache.get(key, [&] {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ma, mb, mbias, mc), default_attr(),
                                    engine());
    return std::make_shared<const Prim>(Prim{dnnl::matmul(pd), pd});
  });
  if (!prim) return false;
  execute(*prim, {{DNNL_ARG_SRC, ma, xc.data_ptr()},
                  {DNNL_ARG_WEIGHTS, mb, wc.data_ptr()},
                  {DNNL_ARG_BIAS, mbias, bias.data_ptr()},
                  {DNNL_ARG_DST, mc, out.data_ptr(), true}});
  return true;
}

}  // namespace minidl::cpu::onednn
#endif  // MINIDL_WITH_ONEDNN
