// Factories: zeros/ones/full(_like), arange, linspace, eye, from_blob, tensor(vector),
// scalar_tensor. Device agnostic (fill/arange/copy kernels do the work).
#include <cmath>

#include "tensor/ops.h"

namespace minidl {

Tensor full(const Shape& shape, Scalar value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  native::fill_(t, value);
  return t;
}
Tensor zeros(const Shape& shape, DType dtype, Device device) {
  return full(shape, 0, dtype, device);
}
Tensor ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1, dtype, device);
}
Tensor empty_like(const Tensor& t) {
  return empty(t.shape(), t.dtype(), t.device());
}
Tensor zeros_like(const Tensor& t) {
  return zeros(t.shape(), t.dtype(), t.device());
}
Tensor ones_like(const Tensor& t) {
  return ones(t.shape(), t.dtype(), t.device());
}
Tensor full_like(const Tensor& t, Scalar value) {
  return full(t.shape(), value, t.dtype(), t.device());
}
Tensor scalar_tensor(Scalar value, DType dtype, Device device) {
  return full({}, value, dtype, device);
}

Tensor arange(Scalar end, DType dtype, Device device) {
  return arange(0, end, 1, dtype, device);
}

Tensor arange(Scalar start, Scalar end, Scalar step, DType dtype, Device device) {
  const double s = start.to_double(), e = end.to_double(), st = step.to_double();
  MINIDL_CHECK(st != 0, "arange: step must be nonzero");
  MINIDL_CHECK(std::isfinite(s) && std::isfinite(e), "arange: unsupported range ", s, " -> ", e);
  MINIDL_CHECK((st > 0 && e >= s) || (st < 0 && e <= s), "arange: upper bound ", e,
               " and lower bound ", s, " inconsistent with step sign ", st);
  MINIDL_CHECK(dtype != kBool, "arange: dtype bool is not supported");
  if (is_integral(dtype))
    MINIDL_CHECK(start.is_integral() && end.is_integral() && step.is_integral(),
                 "arange: floating-point bounds with integer dtype ", dtype);
  const int64_t n = int64_t(std::ceil((e - s) / st));
  Tensor out = empty({n}, dtype, device);
  if (n > 0) kernel<Op::arange>(device)(out, s, st);
  return out;
}

Tensor linspace(double start, double end, int64_t steps, DType dtype, Device device) {
  MINIDL_CHECK(steps >= 0, "linspace: number of steps must be non-negative, got ", steps);
  // PyTorch: "linspace_cpu" not implemented for 'Bool' (a value near 0 would decide the bit)
  MINIDL_CHECK(dtype != kBool, "linspace: dtype bool is not supported");
  Tensor out = empty({steps}, dtype, device);
  if (steps == 0) return out;
  if (steps == 1) return native::fill_(out, start);
  const double step = (end - start) / double(steps - 1);
  // PyTorch fills the first half from start and the second half from end (symmetric).
  const int64_t half = steps / 2;
  Tensor lo = native::narrow(out, 0, 0, half), hi = native::narrow(out, 0, half, steps - half);
  Tensor tmp_lo = empty({half}, kFloat64, device), tmp_hi = empty({steps - half}, kFloat64, device);
  if (half > 0) kernel<Op::arange>(device)(tmp_lo, start, step);
  kernel<Op::arange>(device)(tmp_hi, end - double(steps - 1 - half) * step, step);
  native::copy_(lo, tmp_lo);
  native::copy_(hi, tmp_hi);
  native::fill_(native::narrow(out, 0, steps - 1, 1), end);
  return out;
}

Tensor eye(int64_t n, std::optional<int64_t> m_opt, DType dtype, Device device) {
  const int64_t m = m_opt.value_or(n);
  MINIDL_CHECK(n >= 0 && m >= 0, "eye: n and m must be non-negative, got ", n, " and ", m);
  Tensor out = zeros({n, m}, dtype, device);
  const int64_t d = std::min(n, m);
  if (d > 0) native::fill_(native::as_strided(out, {d}, {m + 1}, 0), 1);
  return out;
}

Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device,
                 std::function<void(void*)> deleter) {
  for (int64_t d : shape)
    MINIDL_CHECK(d >= 0, "from_blob: negative dimension in shape ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(data, size_t(shape_numel(shape)) * itemsize(dtype),
                                            device, std::move(deleter));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

template <typename T>
Tensor tensor(const std::vector<T>& values, std::optional<Shape> shape) {
  Shape s = shape.value_or(Shape{int64_t(values.size())});
  MINIDL_CHECK(shape_numel(s) == int64_t(values.size()), "tensor: ", values.size(),
               " values do not fill shape ", shape_str(s));
  Tensor t = empty(s, dtype_of<T>());
  T* p = static_cast<T*>(t.data_ptr());
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}
template Tensor tensor<float>(const std::vector<float>&, std::optional<Shape>);
template Tensor tensor<double>(const std::vector<double>&, std::optional<Shape>);
template Tensor tensor<int32_t>(const std::vector<int32_t>&, std::optional<Shape>);
template Tensor tensor<int64_t>(const std::vector<int64_t>&, std::optional<Shape>);
template Tensor tensor<uint8_t>(const std::vector<uint8_t>&, std::optional<Shape>);
template Tensor tensor<bool>(const std::vector<bool>&, std::optional<Shape>);

Tensor tensor(std::initializer_list<double> values, DType dtype) {
  return native::to(tensor(std::vector<double>(values)), dtype);
}

}  // namespace minidl
