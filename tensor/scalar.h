// Scalar: a number of unspecified tensor type (double, int64 or bool), as PyTorch's Scalar.
#pragma once
#include <cstdint>
#include <ostream>
#include <type_traits>

#include "tensor/dtype.h"

namespace minidl {

class Scalar {
 public:
  enum class Kind : uint8_t { floating, integral, boolean };

  Scalar() : Scalar(int64_t(0)) {}
  template <typename T>
  requires std::is_arithmetic_v<T> Scalar(T v) {
    if constexpr (std::is_same_v<T, bool>) {
      kind_ = Kind::boolean;
      i_ = v;
    } else if constexpr (std::is_integral_v<T>) {
      kind_ = Kind::integral;
      i_ = int64_t(v);
    } else {
      kind_ = Kind::floating;
      d_ = double(v);
    }
  }
  Scalar(Half v) : Scalar(float(v)) {}
  Scalar(BFloat16 v) : Scalar(float(v)) {}

  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::floating; }
  bool is_integral() const { return kind_ == Kind::integral; }
  bool is_bool() const { return kind_ == Kind::boolean; }

  double to_double() const { return kind_ == Kind::floating ? d_ : double(i_); }
  int64_t to_int() const { return kind_ == Kind::floating ? int64_t(d_) : i_; }
  bool to_bool() const { return kind_ == Kind::floating ? d_ != 0.0 : i_ != 0; }
  template <typename T>
  T to() const {
    if constexpr (std::is_same_v<T, bool>)
      return to_bool();
    else if constexpr (std::is_integral_v<T>)
      return T(to_int());
    else
      return T(float_or(to_double()));
  }
  // The dtype a Scalar gets when wrapped alone: f32 / i64 / bool (PyTorch defaults).
  DType default_dtype() const {
    return kind_ == Kind::floating   ? DType::f32
           : kind_ == Kind::integral ? DType::i64
                                     : DType::boolean;
  }

 private:
  static double float_or(double d) { return d; }
  Kind kind_;
  double d_ = 0;
  int64_t i_ = 0;
};

inline std::ostream& operator<<(std::ostream& os, const Scalar& s) {
  if (s.is_floating()) return os << s.to_double();
  if (s.is_bool()) return os << (s.to_bool() ? "True" : "False");
  return os << s.to_int();
}

}  // namespace minidl
