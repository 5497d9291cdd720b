// Tensor's math methods (declared in tensor/tensor.h): thin forwards to the differentiable ops
// of autograd/ops.h, so x.pow(2).sum() records the same history as sum(pow(x, 2)). Calls are
// qualified: inside a member, an unqualified sum(...) would find the method itself.
#include "autograd/ops.h"

namespace minidl {

// ---- unary
Tensor Tensor::neg() const {
  return minidl::neg(*this);
}
Tensor Tensor::abs() const {
  return minidl::abs(*this);
}
Tensor Tensor::sign() const {
  return minidl::sign(*this);
}
Tensor Tensor::exp() const {
  return minidl::exp(*this);
}
Tensor Tensor::log() const {
  return minidl::log(*this);
}
Tensor Tensor::log1p() const {
  return minidl::log1p(*this);
}
Tensor Tensor::sqrt() const {
  return minidl::sqrt(*this);
}
Tensor Tensor::rsqrt() const {
  return minidl::rsqrt(*this);
}
Tensor Tensor::square() const {
  return minidl::square(*this);
}
Tensor Tensor::sin() const {
  return minidl::sin(*this);
}
Tensor Tensor::cos() const {
  return minidl::cos(*this);
}
Tensor Tensor::tanh() const {
  return minidl::tanh(*this);
}
Tensor Tensor::sigmoid() const {
  return minidl::sigmoid(*this);
}
Tensor Tensor::relu() const {
  return minidl::relu(*this);
}
Tensor Tensor::gelu(std::string_view approximate) const {
  return minidl::gelu(*this, approximate);
}
Tensor Tensor::silu() const {
  return minidl::silu(*this);
}
Tensor Tensor::erf() const {
  return minidl::erf(*this);
}
Tensor Tensor::clamp(std::optional<Scalar> min, std::optional<Scalar> max) const {
  return minidl::clamp(*this, min, max);
}

// ---- binary
Tensor Tensor::add(const Tensor& other, Scalar alpha) const {
  return minidl::add(*this, other, alpha);
}
Tensor Tensor::add(Scalar other) const {
  return minidl::add(*this, other);
}
Tensor Tensor::sub(const Tensor& other, Scalar alpha) const {
  return minidl::sub(*this, other, alpha);
}
Tensor Tensor::sub(Scalar other) const {
  return minidl::sub(*this, other);
}
Tensor Tensor::mul(const Tensor& other) const {
  return minidl::mul(*this, other);
}
Tensor Tensor::mul(Scalar other) const {
  return minidl::mul(*this, other);
}
Tensor Tensor::div(const Tensor& other) const {
  return minidl::div(*this, other);
}
Tensor Tensor::div(Scalar other) const {
  return minidl::div(*this, other);
}
Tensor Tensor::pow(const Tensor& exponent) const {
  return minidl::pow(*this, exponent);
}
Tensor Tensor::pow(Scalar exponent) const {
  return minidl::pow(*this, exponent);
}
Tensor Tensor::maximum(const Tensor& other) const {
  return minidl::maximum(*this, other);
}
Tensor Tensor::minimum(const Tensor& other) const {
  return minidl::minimum(*this, other);
}

// ---- comparisons
Tensor Tensor::eq(const Tensor& other) const {
  return minidl::eq(*this, other);
}
Tensor Tensor::eq(Scalar other) const {
  return minidl::eq(*this, other);
}
Tensor Tensor::ne(const Tensor& other) const {
  return minidl::ne(*this, other);
}
Tensor Tensor::ne(Scalar other) const {
  return minidl::ne(*this, other);
}
Tensor Tensor::lt(const Tensor& other) const {
  return minidl::lt(*this, other);
}
Tensor Tensor::lt(Scalar other) const {
  return minidl::lt(*this, other);
}
Tensor Tensor::le(const Tensor& other) const {
  return minidl::le(*this, other);
}
Tensor Tensor::le(Scalar other) const {
  return minidl::le(*this, other);
}
Tensor Tensor::gt(const Tensor& other) const {
  return minidl::gt(*this, other);
}
Tensor Tensor::gt(Scalar other) const {
  return minidl::gt(*this, other);
}
Tensor Tensor::ge(const Tensor& other) const {
  return minidl::ge(*this, other);
}
Tensor Tensor::ge(Scalar other) const {
  return minidl::ge(*this, other);
}

// ---- in place
Tensor& Tensor::add_(const Tensor& other, Scalar alpha) {
  return minidl::add_(*this, other, alpha);
}
Tensor& Tensor::add_(Scalar other) {
  return minidl::add_(*this, other);
}
Tensor& Tensor::sub_(const Tensor& other, Scalar alpha) {
  return minidl::sub_(*this, other, alpha);
}
Tensor& Tensor::mul_(const Tensor& other) {
  return minidl::mul_(*this, other);
}
Tensor& Tensor::mul_(Scalar other) {
  return minidl::mul_(*this, other);
}
Tensor& Tensor::div_(const Tensor& other) {
  return minidl::div_(*this, other);
}
Tensor& Tensor::clamp_(std::optional<Scalar> min, std::optional<Scalar> max) {
  return minidl::clamp_(*this, min, max);
}

// ---- reductions
Tensor Tensor::sum(std::optional<DType> dtype) const {
  return minidl::sum(*this, {}, false, dtype);
}
Tensor Tensor::sum(int64_t dim, bool keepdim, std::optional<DType> dtype) const {
  return minidl::sum(*this, {dim}, keepdim, dtype);
}
Tensor Tensor::sum(const DimList& dims, bool keepdim, std::optional<DType> dtype) const {
  return minidl::sum(*this, dims, keepdim, dtype);
}
Tensor Tensor::mean() const {
  return minidl::mean(*this);
}
Tensor Tensor::mean(int64_t dim, bool keepdim) const {
  return minidl::mean(*this, {dim}, keepdim);
}
Tensor Tensor::mean(const DimList& dims, bool keepdim) const {
  return minidl::mean(*this, dims, keepdim);
}
Tensor Tensor::var(const DimList& dims, double correction, bool keepdim) const {
  return minidl::var(*this, dims, correction, keepdim);
}
Tensor Tensor::var(int64_t dim, double correction, bool keepdim) const {
  return minidl::var(*this, {dim}, correction, keepdim);
}
Tensor Tensor::std(const DimList& dims, double correction, bool keepdim) const {
  return minidl::std(*this, dims, correction, keepdim);
}
Tensor Tensor::std(int64_t dim, double correction, bool keepdim) const {
  return minidl::std(*this, {dim}, correction, keepdim);
}
Tensor Tensor::amax(const DimList& dims, bool keepdim) const {
  return minidl::amax(*this, dims, keepdim);
}
Tensor Tensor::amin(const DimList& dims, bool keepdim) const {
  return minidl::amin(*this, dims, keepdim);
}
Tensor Tensor::max() const {
  return minidl::max(*this);
}
Tensor Tensor::min() const {
  return minidl::min(*this);
}
std::pair<Tensor, Tensor> Tensor::max(int64_t dim, bool keepdim) const {
  return minidl::max(*this, dim, keepdim);
}
std::pair<Tensor, Tensor> Tensor::min(int64_t dim, bool keepdim) const {
  return minidl::min(*this, dim, keepdim);
}
Tensor Tensor::argmax(std::optional<int64_t> dim, bool keepdim) const {
  return minidl::argmax(*this, dim, keepdim);
}
Tensor Tensor::argmin(std::optional<int64_t> dim, bool keepdim) const {
  return minidl::argmin(*this, dim, keepdim);
}
Tensor Tensor::logsumexp(const DimList& dims, bool keepdim) const {
  return minidl::logsumexp(*this, dims, keepdim);
}
Tensor Tensor::cumsum(int64_t dim, std::optional<DType> dtype) const {
  return minidl::cumsum(*this, dim, dtype);
}

// ---- softmax, linear algebra, masking, indexing
Tensor Tensor::softmax(int64_t dim) const {
  return minidl::softmax(*this, dim);
}
Tensor Tensor::log_softmax(int64_t dim) const {
  return minidl::log_softmax(*this, dim);
}
Tensor Tensor::matmul(const Tensor& other) const {
  return minidl::matmul(*this, other);
}
Tensor Tensor::mm(const Tensor& other) const {
  return minidl::mm(*this, other);
}
Tensor Tensor::bmm(const Tensor& other) const {
  return minidl::bmm(*this, other);
}
Tensor Tensor::tril(int64_t diagonal) const {
  return minidl::tril(*this, diagonal);
}
Tensor Tensor::triu(int64_t diagonal) const {
  return minidl::triu(*this, diagonal);
}
Tensor Tensor::masked_fill(const Tensor& mask, Scalar value) const {
  return minidl::masked_fill(*this, mask, value);
}
Tensor Tensor::index_select(int64_t dim, const Tensor& index) const {
  return minidl::index_select(*this, dim, index);
}
Tensor Tensor::gather(int64_t dim, const Tensor& index) const {
  return minidl::gather(*this, dim, index);
}

}  // namespace minidl
