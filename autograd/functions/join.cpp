// The differentiable joining and splitting ops: cat runs its raw op (tensor/ops/join.cpp) and
// records one node that splits the gradient back; stack/split/chunk are composites of
// differentiable views (unsqueeze + cat, narrow).
#include <algorithm>

#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/ops.h"

namespace minidl {

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  if (auto ac = amp::autocast_list<amp::AutocastOp::cat>(tensors)) return cat(ac.tensors, dim);
  Tensor out = native::cat(tensors, dim);  // checks the list
  if (!GradMode::is_enabled() || !is_floating(out.dtype())) return out;
  bool any = false;
  for (const Tensor& t : tensors) any = any || t.requires_grad();
  if (!any) return out;
  // the reference tensor of the raw op: legacy 1-D empties ([0]) are skipped when others are
  // of higher rank
  const Tensor* ref = nullptr;
  for (const Tensor& t : tensors)
    if (!(t.dim() == 1 && t.numel() == 0)) ref = ref ? ref : &t;
  if (!ref) ref = &tensors[0];
  const int64_t d = wrap_dim(dim, ref->dim(), "cat");
  const bool skip_legacy = ref->dim() != 1;
  // per input: (start, length) along d, or length -1 for skipped legacy empties; its dtype
  std::vector<std::pair<int64_t, int64_t>> ranges;
  std::vector<DType> dtypes;
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    dtypes.push_back(t.dtype());
    if (t.dim() == 1 && t.numel() == 0 && skip_legacy) {
      ranges.emplace_back(0, -1);
      continue;
    }
    ranges.emplace_back(offset, t.size(d));
    offset += t.size(d);
  }
  autograd::record(
      "CatBackward", tensors, {&out}, {}, [d, ranges, dtypes](const auto& g, const auto&) {
        std::vector<Tensor> gi;
        for (size_t i = 0; i < ranges.size(); ++i) {
          if (!is_floating(dtypes[i])) {
            gi.emplace_back();  // integer inputs never require grad
          } else if (ranges[i].second < 0) {
            gi.push_back(zeros({0}, dtypes[i], g[0].device()));  // skipped legacy [0]
          } else {
            gi.push_back(g[0].narrow(d, ranges[i].first, ranges[i].second).to(dtypes[i]));
          }
        }
        return gi;
      });
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  if (auto ac = amp::autocast_list<amp::AutocastOp::stack>(tensors)) return stack(ac.tensors, dim);
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
    expanded.push_back(tensors[i].unsqueeze(d));
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
    out.push_back(x.narrow(d, start, std::min(split_size, n - start)));
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
    out.push_back(x.narrow(d, start, s));
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

}  // namespace minidl
