// Element types (DType), their C++ types, promotion rules and a dispatch helper that runs
// a templated lambda for the C++ type behind a runtime DType.
#pragma once
#include <complex>
#include <cstdint>
#include <ostream>
#include <string_view>
#include <type_traits>

#include "tensor/error.h"
#include "tensor/half.h"

namespace minidl {

enum class DType : uint8_t {
#define MINIDL_DTYPE(name, ...) name,
#include "tensor/dtypes.def"
#undef MINIDL_DTYPE
};
inline constexpr int kNumDTypes = 0
#define MINIDL_DTYPE(...) +1
#include "tensor/dtypes.def"
#undef MINIDL_DTYPE
    ;

// PyTorch-style short aliases: minidl::kFloat32, ...
inline constexpr DType kFloat32 = DType::f32, kFloat = DType::f32, kFloat64 = DType::f64,
                       kDouble = DType::f64, kFloat16 = DType::f16, kHalf = DType::f16,
                       kBFloat16 = DType::bf16, kInt32 = DType::i32, kInt = DType::i32,
                       kInt64 = DType::i64, kLong = DType::i64, kUInt8 = DType::u8,
                       kBool = DType::boolean;

constexpr size_t itemsize(DType t) {
  switch (t) {
#define MINIDL_DTYPE(name, T, size, ...) \
  case DType::name:                      \
    return size;
#include "tensor/dtypes.def"
#undef MINIDL_DTYPE
  }
  return 0;
}

// Name as PyTorch prints it ("float32", "int64", "bool", ...).
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
#define MINIDL_DTYPE(name, T, size, torch_name, ...) \
  case DType::name:                                  \
    return torch_name;
#include "tensor/dtypes.def"
#undef MINIDL_DTYPE
  }
  return "?";
}
// Short name in collective descriptions ("f32", "i64", "bool").
constexpr std::string_view dtype_short_name(DType t) {
  switch (t) {
#define MINIDL_DTYPE(name, T, size, torch_name, short_name, ...) \
  case DType::name:                                              \
    return short_name;
#include "tensor/dtypes.def"
#undef MINIDL_DTYPE
  }
  return "?";
}
// PyTorch's ScalarType name ("Float", "Long"), as its casting errors spell it.
constexpr std::string_view dtype_torch_scalar_type(DType t) {
  switch (t) {
#define MINIDL_DTYPE(name, T, size, torch_name, short_name, scalar_type, ...) \
  case DType::name:                                                           \
    return scalar_type;
#include "tensor/dtypes.def"
#undef MINIDL_DTYPE
  }
  return "?";
}
inline std::ostream& operator<<(std::ostream& os, DType t) {
  return os << dtype_name(t);
}

constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
constexpr bool is_integral(DType t, bool include_bool = false) {
  return t == DType::i32 || t == DType::i64 || t == DType::u8 ||
         (include_bool && t == DType::boolean);
}

// Type promotion for two tensor dtypes, PyTorch's table (bool < integers < floats;
// f16 with bf16 gives f32; u8 with i32 gives i32).
DType promote_types(DType a, DType b);

// The C++ type behind each dtype, and the dtype of each C++ type.
template <DType D>
struct CppType;
template <typename T>
constexpr DType dtype_of();
#define MINIDL_DTYPE(name, T, ...) \
  template <>                      \
  struct CppType<DType::name> {    \
    using type = T;                \
  };                               \
  template <>                      \
  constexpr DType dtype_of<T>() {  \
    return DType::name;            \
  }
#include "tensor/dtypes.def"
#undef MINIDL_DTYPE

// Accumulation / compute type: f16 and bf16 compute in float, others in themselves.
template <typename T>
struct OpMath {
  using type = T;
};
template <>
struct OpMath<Half> {
  using type = float;
};
template <>
struct OpMath<BFloat16> {
  using type = float;
};
template <typename T>
using opmath_t = typename OpMath<T>::type;

// The accumulator of a running sum (cumsum on CPU and CUDA): opmath_t for floats, the unsigned
// twin for integers (so integer scans wrap like PyTorch's instead of overflowing).
template <typename T>
struct ScanAcc {
  using type = opmath_t<T>;
};
template <typename T>
requires(std::is_integral_v<T> && !std::is_same_v<T, bool>) struct ScanAcc<T> {
  using type = std::make_unsigned_t<T>;
};
template <typename T>
using scan_acc_t = typename ScanAcc<T>::type;

template <typename T>
constexpr bool is_reduced_float_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <typename T>
constexpr bool is_float_v = std::is_floating_point_v<T> || is_reduced_float_v<T>;

// Runs fn<B>() with B an unsigned type of the element's size (bitwise element copies).
template <typename Fn>
void dispatch_bits(size_t itemsize, Fn&& fn) {
  switch (itemsize) {
    case 1:
      return fn.template operator()<uint8_t>();
    case 2:
      return fn.template operator()<uint16_t>();
    case 4:
      return fn.template operator()<uint32_t>();
    default:
      return fn.template operator()<uint64_t>();
  }
}

// Runs fn.template operator()<T>() for the C++ type T of `t`:
//   dispatch_all(t, "relu", [&]<typename T>() { ... });
template <typename Fn>
decltype(auto) dispatch_all(DType t, std::string_view op, Fn&& fn) {
  switch (t) {
#define MINIDL_DTYPE(name, T, ...) \
  case DType::name:                \
    return fn.template operator()<T>();
#include "tensor/dtypes.def"
#undef MINIDL_DTYPE
  }
  MINIDL_FAIL("op `", op, "`: unknown dtype");
}

// Floating dtypes only (f32, f64, f16, bf16); other dtypes throw naming the op.
template <typename Fn>
decltype(auto) dispatch_floating(DType t, std::string_view op, Fn&& fn) {
  switch (t) {
#define MINIDL_DTYPE(name, T, ...)                                   \
  case DType::name:                                                  \
    if constexpr (is_float_v<T>) return fn.template operator()<T>(); \
    break;
#include "tensor/dtypes.def"
#undef MINIDL_DTYPE
  }
  MINIDL_FAIL("op `", op, "` needs a floating dtype, got ", t);
}

// Numeric dtypes (everything but bool).
template <typename Fn>
decltype(auto) dispatch_numeric(DType t, std::string_view op, Fn&& fn) {
  if (t == DType::boolean) MINIDL_FAIL("op `", op, "` does not support dtype bool");
  return dispatch_all(t, op, std::forward<Fn>(fn));
}

}  // namespace minidl
