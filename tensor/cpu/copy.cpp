// CPU kernels: strided copy with cast between every dtype pair, fill, arange.
#include <cstring>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/dispatch.h"

namespace minidl::cpu {
namespace {

// Converts between element types through opmath (bool: nonzero test; float->int truncates).
template <typename TO, typename TI>
inline TO convert(TI v) {
  if constexpr (std::is_same_v<TO, TI>) {
    return v;
  } else if constexpr (std::is_same_v<TO, bool>) {
    return static_cast<opmath_t<TI>>(v) != opmath_t<TI>(0);
  } else if constexpr (is_reduced_float_v<TO>) {
    return TO(static_cast<float>(static_cast<opmath_t<TI>>(v)));
  } else {
    return static_cast<TO>(static_cast<opmath_t<TI>>(v));
  }
}

void copy_kernel(const Tensor& src, Tensor& dst) {
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    std::memcpy(dst.data_ptr(), src.data_ptr(), dst.nbytes());
    return;
  }
  dispatch_all(dst.dtype(), "copy", [&]<typename TO>() {
    dispatch_all(src.dtype(), "copy", [&]<typename TI>() {
      unary_loop<TO, TI>(src, dst, [](TI v) { return convert<TO, TI>(v); });
    });
  });
}

void fill_kernel(Tensor& out, Scalar value) {
  dispatch_all(out.dtype(), "fill", [&]<typename T>() {
    const T v = value.to<T>();
    for_each_row<1>({&out}, [&](std::array<char*, 1> p, std::array<int64_t, 1> s, int64_t n) {
      if (s[0] == sizeof(T)) {
        T* o = reinterpret_cast<T*>(p[0]);
        std::fill(o, o + n, v);
      } else {
        for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
      }
    });
  });
}

void arange_kernel(Tensor& out, double start, double step) {
  dispatch_numeric(out.dtype(), "arange", [&]<typename T>() {
    T* o = out.data_ptr<T>();
    const int64_t n = out.numel();
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_integral_v<T>)
        o[i] = T(int64_t(start) + i * int64_t(step));
      else
        o[i] = T(static_cast<opmath_t<T>>(start + double(i) * step));
    }
  });
}

}  // namespace

void register_copy_kernels() {
  register_kernel<Op::copy>(DeviceType::cpu, copy_kernel);
  register_kernel<Op::fill>(DeviceType::cpu, fill_kernel);
  register_kernel<Op::arange>(DeviceType::cpu, arange_kernel);
}

}  // namespace minidl::cpu
