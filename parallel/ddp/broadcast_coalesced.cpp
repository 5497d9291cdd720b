// broadcast_coalesced: bucketing by (dtype, device) in first-seen order, packing on the root,
// one broadcast per bucket, unpacking on the other ranks.
#include "parallel/ddp/broadcast_coalesced.h"

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace minidl::dist {

int broadcast_coalesced(ProcessGroup& group, const std::vector<Tensor>& tensors, int root,
                        int64_t bucket_bytes) {
  NoGradGuard no_grad;
  struct Bucket {
    std::vector<size_t> ids;
    int64_t numel = 0, bytes = 0;
    Tensor flat;  // packed [numel]; undefined when the bucket's one tensor goes as it is
  };
  std::vector<Bucket> buckets;
  std::map<std::pair<int, std::string>, size_t> open;  // (dtype, device) -> open bucket
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    MINIDL_CHECK(t.defined(), "broadcast_coalesced: tensor ", i, " is undefined");
    if (t.numel() == 0) continue;
    const auto key = std::make_pair(int(t.dtype()), t.device().str());
    const int64_t bytes = int64_t(t.nbytes());
    auto it = open.find(key);
    if (it == open.end() || (buckets[it->second].bytes + bytes > bucket_bytes)) {
      buckets.push_back({});
      it = open.insert_or_assign(key, buckets.size() - 1).first;
    }
    Bucket& b = buckets[it->second];
    b.ids.push_back(i);
    b.numel += t.numel();
    b.bytes += bytes;
  }
  const bool is_root = group.rank() == root;
  std::vector<std::shared_ptr<Work>> works;
  for (Bucket& b : buckets) {
    const Tensor& first = tensors[b.ids[0]];
    if (b.ids.size() == 1 && first.is_contiguous()) {
      Tensor t = first;
      works.push_back(group.broadcast(t, root));
      continue;
    }
    b.flat = empty({b.numel}, first.dtype(), first.device());
    if (is_root) {
      int64_t off = 0;
      for (size_t i : b.ids) {
        b.flat.narrow(0, off, tensors[i].numel()).view(tensors[i].shape()).copy_(tensors[i]);
        off += tensors[i].numel();
      }
    }
    works.push_back(group.broadcast(b.flat, root));
  }
  for (auto& w : works) w->wait();
  if (!is_root)
    for (Bucket& b : buckets) {
      if (!b.flat.defined()) continue;
      int64_t off = 0;
      for (size_t i : b.ids) {
        Tensor dst = tensors[i];
        dst.copy_(b.flat.narrow(0, off, dst.numel()).view(dst.shape()));
        off += dst.numel();
      }
    }
  return int(works.size());
}

}  // namespace minidl::dist
