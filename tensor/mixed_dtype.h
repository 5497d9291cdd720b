// Dtype dispatch for kernels whose operands mix a floating dtype with its 16-bit twins (an f32
// sum beside a bf16 residual and a bf16 output: add_layer_norm on both devices).
#pragma once
#include <string_view>
#include <type_traits>

#include "tensor/dtype.h"

namespace minidl {

// Whether d is base, or base is f32 and d one of its 16-bit twins (the dtypes below dispatch).
constexpr bool is_same_or_half(DType d, DType base) {
  return d == base || (base == DType::f32 && (d == DType::f16 || d == DType::bf16));
}

// fn<U>() for U = T, or where T is float also U = Half or BFloat16 (the 16-bit twin of an f32
// operand in a mixed-precision kernel); any other dtype throws naming the op and `what`.
template <typename T, typename Fn>
decltype(auto) dispatch_same_or_half(DType t, std::string_view op, std::string_view what, Fn&& fn) {
  if (t == dtype_of<T>()) return fn.template operator()<T>();
  if constexpr (std::is_same_v<T, float>) {
    if (t == DType::bf16) return fn.template operator()<BFloat16>();
    if (t == DType::f16) return fn.template operator()<Half>();
  }
  MINIDL_FAIL("op `", op, "`: ", what, " must be ", dtype_of<T>(),
              std::is_same_v<T, float> ? ", float16 or bfloat16" : "", " (the input's dtype), got ",
              t);
}

// fn<T, A, B>() for T = t's type (floating) and A, B = a's and b's, each T or (T float) 16-bit;
// other dtypes throw naming the op and what_a / what_b.
template <typename Fn>
void dispatch_float_and_twins(DType t, DType a, DType b, std::string_view op,
                              std::string_view what_a, std::string_view what_b, Fn&& fn) {
  dispatch_floating(t, op, [&]<typename T>() {
    dispatch_same_or_half<T>(a, op, what_a, [&]<typename A>() {
      dispatch_same_or_half<T>(b, op, what_b,
                               [&]<typename B>() { fn.template operator()<T, A, B>(); });
    });
  });
}

}  // namespace minidl
