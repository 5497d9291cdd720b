// bmm (and so matmul, mm and linear) through oneDNN's matmul primitive: f32, and bf16 operands
// with f32 accumulation and one rounding (on f32 kernels, a chunk at a time, where the CPU lacks
// native bf16); linear_bias adds the bias to the f32 accumulator. Transposed views and broadcast
// batches (batch stride 0) are passed as strides.
#ifdef MINIDL_WITH_ONEDNN
#include <algorithm>
#include <cstdint>
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
    t = native::contiguous(t);
    o = describe(t);
  }
  return o;
}

// f32 temporaries of the widened operands and the result per call, about (one call for the
// MNIST and GPT linears): bounded like the convolutions' reorders.
constexpr int64_t kChunkBytes = int64_t(16) << 20;

// out[B,M,N] (contiguous) = a @ b (+ bias[N]) for bf16 tensors on oneDNN's f32 kernels: a chunk
// of matrices (or of one matrix's rows) at a time, its operands widened and its result rounded
// by minidl around each call (execute()). The primitive depends on the chunk's dims and the
// operands' strides.
bool matmul_f32_chunks(const Operand& oa, const void* pa, const Operand& ob, const void* pb,
                       const void* bias, void* out, int64_t B, int64_t M, int64_t N, int64_t K) {
  using dt = dnnl::memory::data_type;
  const bool ba = oa.dims[0] > 1, bb = ob.dims[0] > 1;
  const int64_t row = (K + N) * 4, matrix = M * row + (bb ? K * N * 4 : 0);
  int64_t bc = 1, mc = M;
  if (matrix <= kChunkBytes)
    bc = std::clamp<int64_t>(kChunkBytes / std::max<int64_t>(matrix, 1), 1, B);
  else
    mc = std::clamp<int64_t>(kChunkBytes / row, 1, M);
  static PrimCache cache;
  for (int64_t b0 = 0; b0 < B; b0 += bc) {
    for (int64_t m0 = 0; m0 < M; m0 += mc) {
      const int64_t nb = std::min(bc, B - b0), nm = std::min(mc, M - m0);
      const dims_t da{ba ? nb : 1, nm, K}, db{bb ? nb : 1, K, N}, dc{nb, nm, N}, dbias{1, 1, N};
      Key key;
      key.add({int64_t(bias != nullptr)}).add(da).add(db).add(dc).add(oa.strides).add(ob.strides);
      auto prim = cache.get(key, [&] {
        // the operands' own strides: the widened copies keep them, so no f32 reorder runs
        const md a(da, dt::f32, oa.strides), b(db, dt::f32, ob.strides), c = plain(dc, dt::f32);
        dnnl::matmul::desc d =
            bias ? dnnl::matmul::desc(a, b, plain(dbias, dt::f32), c) : dnnl::matmul::desc(a, b, c);
        dnnl::matmul::primitive_desc pd(d, default_attr(), engine());
        return std::make_shared<const Prim>(Prim{dnnl::matmul(pd), pd});
      });
      if (!prim) return false;  // the same for every chunk's dims class: at the first one
      const auto* a =
          static_cast<const uint16_t*>(pa) + (ba ? b0 * oa.strides[0] : 0) + m0 * oa.strides[1];
      const auto* b = static_cast<const uint16_t*>(pb) + (bb ? b0 * ob.strides[0] : 0);
      auto* c = static_cast<uint16_t*>(out) + b0 * M * N + m0 * N;
      std::vector<Arg> args = {{DNNL_ARG_SRC, md(da, dt::bf16, oa.strides), a},
                               {DNNL_ARG_WEIGHTS, md(db, dt::bf16, ob.strides), b},
                               {DNNL_ARG_DST, strided(dc, dt::bf16, {M * N, N, 1}), c, true}};
      if (bias) args.push_back({DNNL_ARG_BIAS, plain(dbias, dt::bf16), bias});
      execute(*prim, args);
    }
  }
  return true;
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
  if (dt == kBFloat16 && onednn_bf16_in_f32())
    return matmul_f32_chunks(*oa, ac.data_ptr(), *ob, bc.data_ptr(), nullptr, out.data_ptr(), B, M,
                             N, K);
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

bool bmm_widened(const Tensor& a, const Tensor& b, Tensor& out) {
  if (a.dtype() != kBFloat16 || b.dtype() != kBFloat16 || out.dtype() != kFloat32) return false;
  if (out.numel() == 0 || a.size(2) == 0 || !out.is_contiguous() || onednn_bf16_in_f32())
    return false;
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  const int64_t cls[4] = {B, M, N, K};
  if (!wanted(OpClass::matmul, kBFloat16, cls)) return false;
  const auto bf16 = *to_dnnl(kBFloat16), f32 = *to_dnnl(kFloat32);
  Tensor ac = a, bc = b;  // contiguous copies only when a layout does not fit
  const std::optional<Operand> oa = describe_or_copy(ac), ob = describe_or_copy(bc);
  MINIDL_CHECK(oa && ob, "bmm (oneDNN, f32 out): unexpected operand layouts ", a.shape_str(),
               " and ", b.shape_str());
  const md ma(oa->dims, bf16, oa->strides), mb(ob->dims, bf16, ob->strides);
  const md mc = plain({B, M, N}, f32);
  static PrimCache cache;
  Key key;
  key.add({B, M, N, K}).add(oa->dims).add(oa->strides).add(ob->dims).add(ob->strides);
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
  Tensor xc = native::unsqueeze(x, 0),
         wc = native::unsqueeze(native::t(w), 0);  // [1,M,K] x [1,K,N]
  const std::optional<Operand> oa = describe_or_copy(xc), ob = describe_or_copy(wc);
  MINIDL_CHECK(oa && ob, "linear (oneDNN): unexpected operand layouts ", x.shape_str(), " and ",
               w.shape_str());
  if (dt == kBFloat16 && onednn_bf16_in_f32())
    return matmul_f32_chunks(*oa, xc.data_ptr(), *ob, wc.data_ptr(), bias.data_ptr(),
                             out.data_ptr(), 1, M, N, K);
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
