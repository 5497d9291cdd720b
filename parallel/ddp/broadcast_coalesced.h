// Broadcast of many tensors in few collectives (c10d's _broadcast_coalesced): tensors are packed
// by (dtype, device) into flat buckets of at most `bucket_bytes`, one broadcast per bucket. DDP
// uses it for the initial parameter/buffer sync and the per-forward buffer broadcast.
#pragma once
#include <cstdint>
#include <vector>

#include "parallel/process_group/process_group.h"
#include "tensor/tensor.h"

namespace minidl::dist {

// DDP's bucket for module-state broadcasts (PyTorch's 250 MiB).
inline constexpr int64_t kBroadcastBucketBytes = int64_t(250) << 20;

// Every tensor takes root's values (in place, without autograd history). All ranks pass tensors
// of the same shapes, dtypes and order. Returns the number of broadcasts issued (one per
// bucket; a bucket of one contiguous tensor is broadcast without a copy).
int broadcast_coalesced(ProcessGroup& group, const std::vector<Tensor>& tensors, int root,
                        int64_t bucket_bytes = kBroadcastBucketBytes);

}  // namespace minidl::dist
