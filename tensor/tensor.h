// Tensor: the one user-facing type. A refcounted handle to TensorImpl (storage + shape +
// strides + offset + dtype, and later autograd metadata). Copies share data, like PyTorch.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/scalar.h"
#include "tensor/storage.h"

namespace minidl {

using Shape = std::vector<int64_t>;    // sizes, PyTorch dim order (NCHW)
using Strides = std::vector<int64_t>;  // in elements
using DimList = std::vector<int64_t>;  // dims, may be negative

std::string shape_str(const Shape& s);  // "[2, 3]"
// `std::cout << x.sizes()` prints "[2, 3]", like shape_str (torch's print(x.shape)).
std::ostream& operator<<(std::ostream& os, const Shape& s);

struct AutogradMeta;  // autograd/node.h
struct Node;          // autograd/node.h

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
  std::shared_ptr<AutogradMeta> autograd;  // empty unless autograd is involved
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // ---- metadata
  const Shape& shape() const { return impl_->shape; }
  // torch's x.size() / x.shape; as text: x.shape_str() -> "[2, 3]" (or `os << x.sizes()`).
  const Shape& sizes() const { return impl_->shape; }
  const Strides& strides() const { return impl_->strides; }
  int64_t dim() const { return int64_t(impl_->shape.size()); }
  int64_t size(int64_t dim) const;    // negative dims count from the end
  int64_t stride(int64_t dim) const;  // negative dims count from the end
  int64_t numel() const;
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->storage->device(); }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_cuda() const { return device().is_cuda(); }
  int64_t storage_offset() const { return impl_->offset; }
  size_t element_size() const { return itemsize(dtype()); }
  size_t nbytes() const { return size_t(numel()) * element_size(); }
  bool is_contiguous() const;
  bool is_floating_point() const { return is_floating(dtype()); }
  const std::shared_ptr<Storage>& storage() const { return impl_->storage; }
  bool shares_storage(const Tensor& o) const { return storage() == o.storage(); }

  // Pointer to the first element (storage base + offset).
  void* data_ptr() const;
  template <typename T>
  T* data_ptr() const {
    MINIDL_CHECK(dtype_of<T>() == dtype(), "data_ptr<", dtype_name(dtype_of<T>()),
                 ">() on a tensor of dtype ", dtype());
    return static_cast<T*>(data_ptr());
  }

  // ---- views (share storage; see tensor/ops/view.cpp)
  Tensor view(const Shape& shape) const;     // one dim may be -1; needs compatible strides
  Tensor reshape(const Shape& shape) const;  // view when possible, else a contiguous copy
  Tensor permute(const DimList& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  // 2-D transpose (0/1-D unchanged)
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;  // clamps
  Tensor select(int64_t dim, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor expand(const Shape& shape) const;  // -1 keeps a size
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor unflatten(int64_t dim, const Shape& sizes) const;
  Tensor as_strided(const Shape& shape, const Strides& strides, int64_t offset) const;
  Tensor contiguous() const;  // itself when already contiguous
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;

  // ---- copies and conversion
  Tensor clone() const;
  Tensor to(DType dtype) const;  // itself when the dtype already matches
  Tensor to(Device device) const;
  Tensor to(Device device, DType dtype) const;
  Tensor cpu() const { return to(kCPU); }
  Tensor cuda(int index = 0) const { return to(Device(DeviceType::cuda, index)); }
  Tensor& copy_(const Tensor& src);  // broadcasting, casting, cross-device
  Tensor& fill_(Scalar value);
  Tensor& zero_() { return fill_(0); }

  // ---- element access (tests, small tensors)
  Scalar item() const;  // one element
  template <typename T>
  T item() const {
    return item().to<T>();
  }
  // One element by index, as double (works on any dtype and device).
  double at(const std::vector<int64_t>& index) const;
  // All elements in row-major order, converted to T (copies to CPU if needed).
  template <typename T>
  std::vector<T> tolist() const;

  std::string str() const;  // PyTorch's print format
  std::string shape_str() const { return minidl::shape_str(shape()); }

  // Version counter of the storage (bumped by in-place ops).
  uint64_t version() const { return impl_->storage->version(); }

  // ---- math methods: PyTorch's Tensor methods as thin forwards to the differentiable ops of
  // autograd/ops.h (same defaults and results; they record autograd history). Declared here,
  // defined one floor up in autograd/tensor_methods.cpp: code under tensor/ must call the raw
  // ops (native::sum(x, ...)), never these methods.
  // unary
  Tensor neg() const;
  Tensor abs() const;
  Tensor sign() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor log1p() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor square() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor gelu(std::string_view approximate = "none") const;
  Tensor silu() const;
  Tensor erf() const;
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt) const;
  Tensor clamp_min(Scalar min) const { return clamp(min, std::nullopt); }
  Tensor clamp_max(Scalar max) const { return clamp(std::nullopt, max); }
  // binary (broadcasting; a Scalar takes part in promotion like a 0-d tensor)
  Tensor add(const Tensor& other, Scalar alpha = 1) const;  // self + alpha * other
  Tensor add(Scalar other) const;
  Tensor sub(const Tensor& other, Scalar alpha = 1) const;
  Tensor sub(Scalar other) const;
  Tensor mul(const Tensor& other) const;
  Tensor mul(Scalar other) const;
  Tensor div(const Tensor& other) const;
  Tensor div(Scalar other) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor pow(Scalar exponent) const;
  Tensor maximum(const Tensor& other) const;
  Tensor minimum(const Tensor& other) const;
  // comparisons (bool results, no gradient)
  Tensor eq(const Tensor& other) const;
  Tensor eq(Scalar other) const;
  Tensor ne(const Tensor& other) const;
  Tensor ne(Scalar other) const;
  Tensor lt(const Tensor& other) const;
  Tensor lt(Scalar other) const;
  Tensor le(const Tensor& other) const;
  Tensor le(Scalar other) const;
  Tensor gt(const Tensor& other) const;
  Tensor gt(Scalar other) const;
  Tensor ge(const Tensor& other) const;
  Tensor ge(Scalar other) const;
  // in place (self is the output)
  Tensor& add_(const Tensor& other, Scalar alpha = 1);
  Tensor& add_(Scalar other);
  Tensor& sub_(const Tensor& other, Scalar alpha = 1);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(Scalar other);
  Tensor& div_(const Tensor& other);
  Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);
  // reductions: an empty DimList reduces every dim; x.sum(1) and x.sum({0, 2}) both work
  Tensor sum(std::optional<DType> dtype = std::nullopt) const;
  Tensor sum(int64_t dim, bool keepdim = false, std::optional<DType> dtype = std::nullopt) const;
  Tensor sum(const DimList& dims, bool keepdim = false,
             std::optional<DType> dtype = std::nullopt) const;
  Tensor mean() const;
  Tensor mean(int64_t dim, bool keepdim = false) const;
  Tensor mean(const DimList& dims, bool keepdim = false) const;
  // correction 1 = Bessel's (torch's unbiased=True), 0 = biased
  Tensor var(const DimList& dims = {}, double correction = 1, bool keepdim = false) const;
  Tensor var(int64_t dim, double correction = 1, bool keepdim = false) const;
  Tensor std(const DimList& dims = {}, double correction = 1, bool keepdim = false) const;
  Tensor std(int64_t dim, double correction = 1, bool keepdim = false) const;
  Tensor amax(const DimList& dims = {}, bool keepdim = false) const;
  Tensor amin(const DimList& dims = {}, bool keepdim = false) const;
  Tensor max() const;  // 0-d
  Tensor min() const;
  std::pair<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;  // values, indices
  std::pair<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;  // int64
  Tensor argmin(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor logsumexp(const DimList& dims, bool keepdim = false) const;
  Tensor cumsum(int64_t dim, std::optional<DType> dtype = std::nullopt) const;
  // softmax, linear algebra, masking, indexing
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor matmul(const Tensor& other) const;  // torch.matmul semantics
  Tensor mm(const Tensor& other) const;      // [M,K] x [K,N]
  Tensor bmm(const Tensor& other) const;     // [B,M,K] x [B,K,N]
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;
  Tensor masked_fill(const Tensor& mask, Scalar value) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;

  // ---- autograd (autograd/variable.cpp)
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true);  // leaves only (like PyTorch)
  const Tensor& grad() const;              // undefined until a backward reaches it
  Tensor& mutable_grad();                  // e.g. for optimizers and zero_grad
  void set_grad(const Tensor& grad);
  const std::shared_ptr<Node>& grad_fn() const;
  bool is_leaf() const;  // no grad_fn
  // Computes gradients of this tensor w.r.t. graph leaves; `gradient` defaults to ones for a
  // one-element tensor. Frees the graph unless retain_graph.
  void backward(const Tensor& gradient = {}, bool retain_graph = false) const;
  Tensor detach() const;  // shares storage, no history
  Tensor& detach_();
  void retain_grad();  // keep .grad for a non-leaf
  // hook(grad) -> replacement grad (or undefined to keep it); returns a handle index
  size_t register_hook(std::function<Tensor(const Tensor&)> hook);
  // Runs after this leaf's .grad was accumulated for the current backward.
  size_t register_post_accumulate_grad_hook(std::function<void(Tensor&)> hook);

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Creates an uninitialised contiguous tensor.
Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = kCPU);
// Contiguous strides for a shape.
Strides contiguous_strides(const Shape& shape);
// Normalises a possibly negative dim against ndim; throws naming `op` when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, std::string_view op = "");
int64_t shape_numel(const Shape& s);

}  // namespace minidl
