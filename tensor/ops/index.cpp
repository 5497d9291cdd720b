// Indexing, raw layer: embedding (+ backward), index_select, gather, scatter_add(_), one_hot,
// topk. Shape/dtype/device checks and output allocation; index range checks are done by the
// kernels before they write. Device agnostic; no history here.
#include "tensor/ops.h"

namespace minidl::native {
namespace {

void check_defined(std::string_view op, const Tensor& t, std::string_view what) {
  MINIDL_CHECK(t.defined(), "op `", op, "`: ", what, " is an undefined tensor");
}

void check_same_device(std::string_view op, const Tensor& a, std::string_view an, const Tensor& b,
                       std::string_view bn) {
  MINIDL_CHECK(a.device() == b.device(), "op `", op, "`: expected all tensors on one device, but ",
               an, " is on ", a.device(), " and ", bn, " is on ", b.device());
}

// int64 indices, converting int32 (embedding, index_select accept both like PyTorch).
Tensor long_index(std::string_view op, const Tensor& index, bool allow_int32) {
  const bool ok = index.dtype() == kInt64 || (allow_int32 && index.dtype() == kInt32);
  MINIDL_CHECK(ok, "op `", op, "`: expected dtype int64", allow_int32 ? " or int32" : "",
               " for index, got ", index.dtype(), " (shape ", index.shape_str(), ")");
  return to(index, kInt64);
}

// 0-d tensors are handed to the kernels as [1] views.
Tensor as_1d(const Tensor& t) {
  return t.dim() == 0 ? view(t, {1}) : t;
}

}  // namespace

// weight:[V,D], indices int64/int32 of any shape -> [*indices, D]
Tensor embedding(const Tensor& weight, const Tensor& indices) {
  check_defined("embedding", weight, "weight");
  check_defined("embedding", indices, "indices");
  MINIDL_CHECK(weight.dim() == 2, "op `embedding`: 'weight' must be 2-D, got shape ",
               weight.shape_str());
  check_same_device("embedding", weight, "weight", indices, "indices");
  Tensor idx = contiguous(long_index("embedding", indices, true));
  Shape shape = indices.shape();
  shape.push_back(weight.size(1));
  Tensor out = empty(shape, weight.dtype(), weight.device());
  kernel<Op::embedding>(weight.device())(weight, 0, idx, out);
  return out;
}

namespace {

// Checks embedding_backward's arguments; returns the indices as contiguous int64.
Tensor embedding_backward_indices(const char* op, const Tensor& grad_out, const Tensor& indices,
                                  int64_t num_weights, int64_t padding_idx) {
  check_defined(op, grad_out, "grad_out");
  check_defined(op, indices, "indices");
  check_same_device(op, grad_out, "grad_out", indices, "indices");
  Tensor idx = contiguous(long_index(op, indices, true));
  Shape expect = indices.shape();
  MINIDL_CHECK(grad_out.dim() == indices.dim() + 1 &&
                   Shape(grad_out.shape().begin(), grad_out.shape().end() - 1) == expect,
               "op `", op, "`: grad_out shape ", grad_out.shape_str(),
               " does not match indices shape ", indices.shape_str(), " + [D]");
  MINIDL_CHECK(num_weights >= 0, "op `", op, "`: num_weights must be non-negative, got ",
               num_weights);
  MINIDL_CHECK(padding_idx < num_weights, "op `", op, "`: padding_idx ", padding_idx,
               " must be within num_weights ", num_weights);
  MINIDL_CHECK(grad_out.dtype() != kBool, "op `", op, "`: grad_out has dtype bool");
  return idx;
}

}  // namespace

// grad_out:[*indices, D] -> grad_weight:[num_weights, D]; repeated indices accumulate, row
// padding_idx gets no gradient (negative padding_idx: none).
Tensor embedding_backward(const Tensor& grad_out, const Tensor& indices, int64_t num_weights,
                          int64_t padding_idx) {
  const Tensor idx =
      embedding_backward_indices("embedding_backward", grad_out, indices, num_weights, padding_idx);
  Tensor grad_w = empty({num_weights, grad_out.size(-1)}, grad_out.dtype(), grad_out.device());
  kernel<Op::embedding_backward>(grad_out.device())(grad_out, idx, grad_w, padding_idx, false);
  return grad_w;
}

Tensor& embedding_backward_add_(Tensor& grad_weight, const Tensor& grad_out, const Tensor& indices,
                                int64_t padding_idx) {
  const char* op = "embedding_backward_add_";
  check_defined(op, grad_weight, "grad_weight");
  MINIDL_CHECK(grad_weight.dim() == 2, "op `", op, "`: grad_weight must be [num_weights, D], got ",
               grad_weight.shape_str());
  const Tensor idx =
      embedding_backward_indices(op, grad_out, indices, grad_weight.size(0), padding_idx);
  check_same_device(op, grad_weight, "grad_weight", grad_out, "grad_out");
  MINIDL_CHECK(grad_weight.dtype() == grad_out.dtype() && grad_weight.size(1) == grad_out.size(-1),
               "op `", op, "`: grad_weight ", grad_weight.shape_str(), " ", grad_weight.dtype(),
               " does not take rows of grad_out ", grad_out.shape_str(), " ", grad_out.dtype());
  kernel<Op::embedding_backward>(grad_out.device())(grad_out, idx, grad_weight, padding_idx, true);
  grad_weight.storage()->bump_version();
  return grad_weight;
}

// out = x with `dim` replaced by index.numel() entries x[..., index[j], ...]
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  check_defined("index_select", x, "input");
  check_defined("index_select", index, "index");
  check_same_device("index_select", x, "input", index, "index");
  MINIDL_CHECK(index.dim() <= 1, "op `index_select`: index is supposed to be a vector, got shape ",
               index.shape_str());
  Tensor idx = reshape(long_index("index_select", index, true), {index.numel()});
  const int64_t d = wrap_dim(dim, x.dim(), "index_select");
  if (x.dim() == 0) {
    MINIDL_CHECK(index.numel() == 1,
                 "op `index_select`: index to a 0-d input can have only 1 "
                 "value, got ",
                 index.numel());
    Tensor out = empty({}, x.dtype(), x.device());
    Tensor o = view(out, {1});
    kernel<Op::index_select>(x.device())(view(x, {1}), 0, idx, o);
    return out;
  }
  Shape shape = x.shape();
  shape[size_t(d)] = index.numel();
  Tensor out = empty(shape, x.dtype(), x.device());
  kernel<Op::index_select>(x.device())(x, d, idx, out);
  return out;
}

// out[i][j] = x[index[i][j]][j] (dim 0); out has index's shape.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  check_defined("gather", x, "input");
  check_defined("gather", index, "index");
  check_same_device("gather", x, "input", index, "index");
  long_index("gather", index, false);
  // 0-d and 1-d tensors mix like PyTorch (a 0-d tensor acts as [1])
  MINIDL_CHECK(index.dim() == x.dim() || (index.dim() <= 1 && x.dim() <= 1),
               "op `gather`: index tensor must have the same number of dimensions as input "
               "tensor, got index ",
               index.shape_str(), " and input ", x.shape_str());
  const int64_t d = wrap_dim(dim, x.dim(), "gather");
  for (int64_t k = 0; k < x.dim() && index.dim() == x.dim(); ++k)
    MINIDL_CHECK(k == d || index.size(k) <= x.size(k),
                 "op `gather`: size does not match at "
                 "dimension ",
                 k, ": expected index ", index.shape_str(), " to be smaller than input ",
                 x.shape_str(), " apart from dimension ", d);
  Tensor out = empty(index.shape(), x.dtype(), x.device());
  Tensor o = as_1d(out);
  kernel<Op::gather>(x.device())(as_1d(x), d, as_1d(index), o);
  return out;
}

// self[..., index[p], ...] += src[p] along dim (dim 0: self[index[i][j]][j] += src[i][j]).
Tensor& scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  check_defined("scatter_add", self, "self");
  check_defined("scatter_add", index, "index");
  check_defined("scatter_add", src, "src");
  check_same_device("scatter_add", self, "self", index, "index");
  check_same_device("scatter_add", self, "self", src, "src");
  long_index("scatter_add", index, false);
  MINIDL_CHECK(self.dtype() == src.dtype(),
               "op `scatter_add`: expected self.dtype to be equal "
               "to src.dtype, got ",
               self.dtype(), " and ", src.dtype());
  auto low = [](const Tensor& t) { return t.dim() <= 1; };
  MINIDL_CHECK((index.dim() == self.dim() && src.dim() == self.dim()) ||
                   (low(self) && low(index) && low(src)),
               "op `scatter_add`: index and src must have the same number of dimensions as "
               "self, got self ",
               self.shape_str(), ", index ", index.shape_str(), ", src ", src.shape_str());
  const int64_t d = wrap_dim(dim, self.dim(), "scatter_add");
  for (int64_t k = 0; k < self.dim(); ++k)
    MINIDL_CHECK(self.stride(k) != 0 || self.size(k) <= 1, "op `scatter_add`: self ",
                 self.shape_str(), " has stride 0 in dimension ", k,
                 ": more than one element of the written-to tensor refers to a single memory "
                 "location");
  const Tensor s1 = as_1d(self), i1 = as_1d(index), src1 = as_1d(src);
  for (int64_t k = 0; k < s1.dim(); ++k)
    MINIDL_CHECK(i1.size(k) <= src1.size(k) && (k == d || i1.size(k) <= s1.size(k)),
                 "op `scatter_add`: expected index ", index.shape_str(),
                 " to be smaller than self ", self.shape_str(), " apart from dimension ", d,
                 " and to be smaller than src ", src.shape_str(), " (dimension ", k, ")");
  Tensor s = s1;
  kernel<Op::scatter_add>(self.device())(s, d, i1, src1);
  self.storage()->bump_version();
  return self;
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  check_defined("scatter_add", x, "input");
  Tensor out = clone(x);
  scatter_add_(out, dim, index, src);
  return out;
}

// indices int64 of any shape -> int64 [*indices, num_classes]; -1 infers max + 1.
Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  check_defined("one_hot", indices, "indices");
  MINIDL_CHECK(indices.dtype() == kInt64,
               "op `one_hot`: one_hot is only applicable to index "
               "tensors (int64), got ",
               indices.dtype());
  MINIDL_CHECK(num_classes >= -1, "op `one_hot`: num_classes must be -1 or non-negative, got ",
               num_classes);
  const int64_t n = indices.numel();
  MINIDL_CHECK(n > 0 || num_classes >= 0,
               "op `one_hot`: can not infer total number of classes "
               "from empty tensor (shape ",
               indices.shape_str(), ")");
  if (n > 0) {
    // min / max through topk(k=1), the one reduction this family owns
    Tensor flat = reshape(indices, {n});
    const int64_t lo = topk(flat, 1, 0, false).first.item<int64_t>();
    const int64_t hi = topk(flat, 1, 0, true).first.item<int64_t>();
    MINIDL_CHECK(lo >= 0, "op `one_hot`: class values must be non-negative, got ", lo);
    if (num_classes == -1) num_classes = hi + 1;
    MINIDL_CHECK(hi < num_classes, "op `one_hot`: class values must be smaller than num_classes ",
                 num_classes, ", got ", hi);
  }
  Shape shape = indices.shape();
  shape.push_back(num_classes);
  Tensor out = zeros(shape, kInt64, indices.device());
  if (n == 0) return out;
  Shape ishape = indices.shape();
  ishape.push_back(1);
  Tensor ones_src = expand(ones({1}, kInt64, indices.device()), ishape);
  return scatter_add_(out, -1, unsqueeze(indices, -1), ones_src);
}

// values + int64 indices of the k largest (smallest) entries along dim.
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  check_defined("topk", x, "input");
  MINIDL_CHECK(x.dtype() != kBool, "op `topk`: not implemented for dtype bool");
  const int64_t d = wrap_dim(dim, x.dim(), "topk");
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  MINIDL_CHECK(k >= 0 && k <= n, "op `topk`: selected index k out of range: k = ", k,
               " but dimension ", d, " has size ", n, " (shape ", x.shape_str(), ")");
  Shape shape = x.shape();
  if (x.dim() > 0) shape[size_t(d)] = k;
  Tensor values = empty(shape, x.dtype(), x.device());
  Tensor indices = empty(shape, kInt64, x.device());
  if (x.dim() == 0 && k == 0) {  // a 0-d result cannot be empty: return [0]
    return {empty({0}, x.dtype(), x.device()), empty({0}, kInt64, x.device())};
  }
  Tensor v = as_1d(values), i = as_1d(indices);
  kernel<Op::topk>(x.device())(as_1d(x), k, d, largest, sorted, v, i);
  return {values, indices};
}

}  // namespace minidl::native
