// CPU kernels of the GPT ops: tril/triu (masking the last two dims), cumsum (a scan per line,
// forward or reverse), div_trunc/div_floor (tensor/div_mode.h) and multinomial (the shared
// per-row sampler of tensor/random.h, so the draws equal the CUDA kernel's).
#include <cstring>
#include <type_traits>
#include <vector>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/dispatch.h"
#include "tensor/div_mode.h"
#include "tensor/random.h"

namespace minidl::cpu {
namespace {

// Offset (in elements) of the i-th position of `shape` (row-major) under `strides`.
int64_t strided_offset(int64_t i, const Shape& shape, const Strides& strides) {
  int64_t off = 0;
  for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
    off += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return off;
}

// x:[..., R, C] -> out (contiguous): keeps element (i, j) where keep(j - i), else zero bits.
template <bool kLower>
void tri_kernel(const Tensor& in, Tensor& out, int64_t diagonal) {
  const int64_t nd = in.dim(), R = in.size(-2), C = in.size(-1);
  if (out.numel() == 0) return;
  const Shape batch_shape(in.shape().begin(), in.shape().end() - 2);
  const Strides batch_strides(in.strides().begin(), in.strides().end() - 2);
  const int64_t batches = shape_numel(batch_shape), sr = in.stride(nd - 2), sc = in.stride(nd - 1);
  dispatch_bits(in.element_size(), [&]<typename B>() {
    const B* src = static_cast<const B*>(in.data_ptr());
    B* dst = static_cast<B*>(out.data_ptr());
    parallel_for(batches * R, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(C, 1)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t row = begin; row < end; ++row) {
                     const int64_t b = row / R, i = row % R;
                     const B* s = src + strided_offset(b, batch_shape, batch_strides) + i * sr;
                     B* o = dst + row * C;
                     for (int64_t j = 0; j < C; ++j) {
                       const bool keep = kLower ? j - i <= diagonal : j - i >= diagonal;
                       o[j] = keep ? s[j * sc] : B(0);
                     }
                   }
                 });
  });
}
void tril_kernel(const Tensor& in, Tensor& out, int64_t diagonal) {
  tri_kernel<true>(in, out, diagonal);
}
void triu_kernel(const Tensor& in, Tensor& out, int64_t diagonal) {
  tri_kernel<false>(in, out, diagonal);
}

// out[.., i, ..] = sum of in along dim up to i (or from i on, reverse); one line per task.
void cumsum_kernel(const Tensor& in, Tensor& out, int64_t dim, bool reverse) {
  MINIDL_CHECK(in.dtype() == out.dtype(), "op `cumsum`: internal: dtypes differ (", in.dtype(),
               " vs ", out.dtype(), ")");
  if (out.numel() == 0) return;
  const int64_t L = in.size(dim), lines = out.numel() / L;
  Shape line_shape = in.shape();
  Strides in_strides = in.strides(), out_strides = out.strides();
  line_shape.erase(line_shape.begin() + dim);
  in_strides.erase(in_strides.begin() + dim);
  out_strides.erase(out_strides.begin() + dim);
  const int64_t si = in.stride(dim), so = out.stride(dim);
  dispatch_numeric(in.dtype(), "cumsum", [&]<typename T>() {
    using A = scan_acc_t<T>;
    const T* src = static_cast<const T*>(in.data_ptr());
    T* dst = static_cast<T*>(out.data_ptr());
    parallel_for(lines, std::max<int64_t>(1, kParallelGrain / L), [&](int64_t begin, int64_t end) {
      for (int64_t l = begin; l < end; ++l) {
        const T* s = src + strided_offset(l, line_shape, in_strides);
        T* o = dst + strided_offset(l, line_shape, out_strides);
        A acc = A(0);
        for (int64_t k = 0; k < L; ++k) {
          const int64_t i = reverse ? L - 1 - k : k;
          acc = A(acc + A(s[i * si]));
          o[i * so] = T(acc);
        }
      }
    });
  });
}

// Rounded division: inputs broadcast to out's shape, one numeric dtype (not bool).
template <bool kFloor>
void div_rounded_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_numeric(out.dtype(), kFloor ? "div_floor" : "div_trunc", [&]<typename T>() {
    using C = opmath_t<T>;
    binary_loop<T, T, T>(a, b, out, [](T x, T y) {
      const C cx = static_cast<C>(x), cy = static_cast<C>(y);
      if constexpr (std::is_floating_point_v<C>)
        return T(kFloor ? div_floor_float(cx, cy) : std::trunc(cx / cy));
      else
        return T(div_int(cx, cy, kFloor));
    });
  });
}
void div_trunc_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  div_rounded_kernel<false>(a, b, out);
}
void div_floor_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  div_rounded_kernel<true>(a, b, out);
}

// w:[B,C] f64 scratch -> out:[B,S] int64; rows in parallel (each row's draws depend only on
// its index, so the thread count does not matter).
void multinomial_kernel(Tensor& w, Tensor& out, bool replacement, Generator& gen) {
  MINIDL_CHECK(w.dtype() == kFloat64 && w.is_contiguous() && out.dtype() == kInt64 &&
                   out.is_contiguous() && w.dim() == 2 && out.dim() == 2,
               "op `multinomial`: internal: expected contiguous f64 [B,C] weights and int64 "
               "[B,S] out, got ",
               w.dtype(), " ", w.shape_str(), " and ", out.dtype(), " ", out.shape_str());
  const int64_t B = w.size(0), C = w.size(1), S = out.size(1);
  if (B * S == 0) return;
  const PhiloxStream s = gen.reserve(PhiloxStream::blocks64(uint64_t(B * S)));
  double* wp = w.data_ptr<double>();
  int64_t* op = out.data_ptr<int64_t>();
  parallel_for(B, std::max<int64_t>(1, kParallelGrain / (C * (replacement ? 1 : S))),
               [&](int64_t begin, int64_t end) {
                 for (int64_t r = begin; r < end; ++r)
                   multinomial_row(wp + r * C, C, S, replacement, s, uint64_t(r * S), op + r * S);
               });
}

}  // namespace

void register_scan_select_kernels() {
  register_kernel<Op::tril>(DeviceType::cpu, tril_kernel);
  register_kernel<Op::triu>(DeviceType::cpu, triu_kernel);
  register_kernel<Op::cumsum>(DeviceType::cpu, cumsum_kernel);
  register_kernel<Op::div_trunc>(DeviceType::cpu, div_trunc_kernel);
  register_kernel<Op::div_floor>(DeviceType::cpu, div_floor_kernel);
  register_kernel<Op::multinomial>(DeviceType::cpu, multinomial_kernel);
}

}  // namespace minidl::cpu
