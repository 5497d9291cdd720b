// div(a, b, rounding_mode) element math shared by the CPU and CUDA kernels (div_trunc,
// div_floor), PyTorch's semantics: floats compute a / b truncated, or floored the way Python's
// a // b is (fmod-based, so 0.3 // 0.1 == 2); integers divide exactly (floor rounds toward
// -inf). Integer division by zero is refused by the frontend before a kernel runs.
#pragma once
#include <cmath>
#include <type_traits>

#include "tensor/half.h"  // MINIDL_HD

namespace minidl {

// Python's float floor division (torch's div_floor_floating).
template <typename C>
MINIDL_HD inline C div_floor_float(C a, C b) {
  if (b == C(0)) return a / b;  // IEEE: ±inf or NaN
  const C mod = std::fmod(a, b);
  C div = (a - mod) / b;
  if (mod != C(0) && (b < C(0)) != (mod < C(0))) div -= C(1);
  if (div == C(0)) return std::copysign(C(0), a / b);
  C floordiv = std::floor(div);
  if (div - floordiv > C(0.5)) floordiv += C(1);
  return floordiv;
}

// Integer a / b truncated toward zero (trunc) or rounded toward -inf (floor). b == 0 gives 0
// (never reached through the frontend); b == -1 negates with wrap-around (INT_MIN / -1).
template <typename C>
MINIDL_HD inline C div_int(C a, C b, bool floor) {
  if (b == C(0)) return C(0);
  if constexpr (std::is_signed_v<C>) {
    using U = std::make_unsigned_t<C>;
    if (b == C(-1)) return C(U(0) - U(a));
    C q = C(a / b);
    if (floor && C(a % b) != C(0) && ((a < C(0)) != (b < C(0)))) q = C(q - C(1));
    return q;
  } else {
    return C(a / b);
  }
}

}  // namespace minidl
