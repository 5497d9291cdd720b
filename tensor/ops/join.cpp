// Joining and splitting, raw layer: cat, stack (copies) and split, chunk (views). Device
// agnostic; no history here (stack/split/chunk are compositions of raw views and cat).
#include <algorithm>

#include "tensor/ops.h"

namespace minidl::native {

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  MINIDL_CHECK(!tensors.empty(), "op `cat`: expected a non-empty list of tensors");
  // PyTorch skips legacy 1-D empty tensors ([0]) when other inputs have higher rank.
  const Tensor* ref = nullptr;
  for (const Tensor& t : tensors) {
    MINIDL_CHECK(t.defined(), "op `cat`: undefined tensor in the list");
    if (!(t.dim() == 1 && t.numel() == 0)) ref = ref ? ref : &t;
  }
  if (!ref) ref = &tensors[0];
  MINIDL_CHECK(ref->dim() > 0, "op `cat`: zero-dimensional tensor cannot be concatenated");
  const int64_t d = wrap_dim(dim, ref->dim(), "cat");
  DType dtype = tensors[0].dtype();
  Shape out_shape = ref->shape();
  out_shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    dtype = i == 0 ? dtype : promote_types(dtype, t.dtype());
    MINIDL_CHECK(t.device() == ref->device(), "op `cat`: tensor ", i, " is on ", t.device(),
                 " but tensor 0 is on ", ref->device());
    if (t.dim() == 1 && t.numel() == 0 && ref->dim() != 1) continue;
    MINIDL_CHECK(t.dim() == ref->dim(),
                 "op `cat`: tensors must have the same number of "
                 "dimensions: got ",
                 ref->dim(), " (shape ", ref->shape_str(), ") and ", t.dim(), " (shape ",
                 t.shape_str(), ") for tensor ", i);
    for (int64_t k = 0; k < t.dim(); ++k)
      MINIDL_CHECK(k == d || t.size(k) == ref->size(k),
                   "op `cat`: sizes of tensors must match "
                   "except in dimension ",
                   d, ". Expected size ", ref->size(k), " but got size ", t.size(k),
                   " for tensor number ", i, " in the list (shapes ", ref->shape_str(), " and ",
                   t.shape_str(), ")");
    out_shape[d] += t.size(d);
  }
  Tensor out = empty(out_shape, dtype, ref->device());
  const bool skip_legacy = ref->dim() != 1;
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    if (t.dim() == 1 && t.numel() == 0 && skip_legacy) continue;
    const int64_t n = t.size(d);
    if (n > 0) {
      Tensor dst = narrow(out, d, offset, n);
      copy_(dst, t);
    }
    offset += n;
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  MINIDL_CHECK(!tensors.empty(), "op `stack`: expected a non-empty list of tensors");
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> expanded;
  expanded.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    MINIDL_CHECK(tensors[i].shape() == tensors[0].shape(),
                 "op `stack`: stack expects each "
                 "tensor to be equal size, but got ",
                 tensors[0].shape_str(), " at entry 0 and ", tensors[i].shape_str(), " at entry ",
                 i);
    expanded.push_back(unsqueeze(tensors[i], d));
  }
  return cat(expanded, d);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  MINIDL_CHECK(x.dim() > 0, "op `split`: expects at least a 1-dimensional tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  MINIDL_CHECK(split_size >= 0, "op `split`: split_size must be non-negative, got ", split_size);
  const int64_t n = x.size(d);
  MINIDL_CHECK(split_size > 0 || n == 0, "op `split`: split_size can only be 0 if dimension ", d,
               " has size 0, but got size ", n);
  std::vector<Tensor> out;
  if (n == 0) {
    out.push_back(x);
    return out;
  }
  for (int64_t start = 0; start < n; start += split_size)
    out.push_back(narrow(x, d, start, std::min(split_size, n - start)));
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  MINIDL_CHECK(x.dim() > 0, "op `split`: expects at least a 1-dimensional tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    MINIDL_CHECK(s >= 0, "op `split`: split sizes must be non-negative, got ", shape_str(sizes));
    total += s;
  }
  MINIDL_CHECK(total == x.size(d), "op `split`: split sizes ", shape_str(sizes), " sum to ", total,
               " but dimension ", d, " has size ", x.size(d), " (shape ", x.shape_str(), ")");
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(narrow(x, d, start, s));
    start += s;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  MINIDL_CHECK(chunks > 0, "op `chunk`: number of chunks must be greater than 0, got ", chunks);
  MINIDL_CHECK(x.dim() > 0, "op `chunk`: expects at least a 1-dimensional tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "chunk");
  const int64_t n = x.size(d);
  const int64_t size = (n + chunks - 1) / chunks;
  if (size == 0) {  // n == 0: PyTorch returns `chunks` empty pieces
    return std::vector<Tensor>(size_t(chunks), x);
  }
  return split(x, size, d);
}

}  // namespace minidl::native
