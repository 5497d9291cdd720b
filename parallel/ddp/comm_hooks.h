// DDP communication hooks (torch.distributed.algorithms.ddp_comm_hooks): a hook replaces the
// allreduce of one gradient bucket. Built-ins: allreduce (the default), fp16/bf16 compression
// (half the bytes on the wire) and PowerSGD (low-rank, with error feedback and warm start).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parallel/process_group/process_group.h"
#include "tensor/tensor.h"

namespace minidl::dist {

// One bucket's gradients as handed to a hook (torch.distributed.GradBucket). buffer() is this
// rank's flat gradient [numel] (the bucket's dtype and device), *not* divided by the world
// size: the hook averages. gradients() are views of buffer() shaped like parameters().
class GradBucket {
 public:
  GradBucket(size_t index, bool is_last, Tensor buffer, std::vector<Tensor> parameters,
             std::vector<int64_t> offsets, ProcessGroup& group)
      : index_(index),
        is_last_(is_last),
        buffer_(std::move(buffer)),
        parameters_(std::move(parameters)),
        offsets_(std::move(offsets)),
        group_(group) {}
  size_t index() const { return index_; }
  bool is_last() const { return is_last_; }  // the last bucket of this backward
  Tensor& buffer() { return buffer_; }
  std::vector<Tensor> gradients() const;
  const std::vector<Tensor>& parameters() const { return parameters_; }
  ProcessGroup& process_group() const { return group_; }

 private:
  size_t index_;
  bool is_last_;
  Tensor buffer_;
  std::vector<Tensor> parameters_;
  std::vector<int64_t> offsets_;  // of each parameter in buffer()
  ProcessGroup& group_;
};

// What a hook returns: the averaged flat gradient of its bucket, valid after wait(). Built from
// an issued collective (its Work) and the tensor it writes; then() adds a step that runs at
// wait() on the previous step's value (it may issue further collectives: every rank calls
// wait() on the buckets in the same order, so they stay in step).
class CommFuture {
 public:
  CommFuture(std::shared_ptr<Work> work, Tensor value)
      : work_(std::move(work)), value_(std::move(value)) {}
  static CommFuture ready(Tensor value) { return CommFuture(nullptr, std::move(value)); }
  CommFuture then(std::function<Tensor(Tensor)> step) &&;
  Tensor wait();  // rethrows a failed collective's error

 private:
  std::shared_ptr<Work> work_;
  Tensor value_;
  std::vector<std::function<Tensor(Tensor)>> steps_;
};

using CommHook = std::function<CommFuture(GradBucket&)>;

// buffer / world size, then a sum allreduce: what DDP does without a hook (bitwise the same).
CommHook allreduce_hook();
// Cast to f16 (bf16), divide by the world size, allreduce, cast back into the bucket: half the
// payload of an f32 bucket, at half-precision accuracy (PyTorch's fp16_compress_hook).
CommHook fp16_compress_hook();
CommHook bf16_compress_hook();

// torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook.PowerSGDState's options.
struct PowerSGDOptions {
  int matrix_approximation_rank = 1;
  // Plain allreduce before this many synchronised steps (the error feedback and warm start
  // need the buckets' final layout, which DDP fixes after its first step: at least 2).
  int64_t start_powerSGD_iter = 1000;
  // Compress a [n, m] gradient only when (n + m) * rank * min_compression_rate < n * m.
  double min_compression_rate = 2;
  bool use_error_feedback = true;
  bool warm_start = true;  // reuse last step's Q instead of a fresh random one
  double orthogonalization_epsilon = 0;
  uint64_t random_seed = 0;  // the initial Qs (the same on every rank)
};

// PowerSGD (Vogels et al. 2019) as PyTorch's powerSGD_hook: each gradient of 2+ dims that is
// worth compressing, viewed as M [n, m] (dim 0 by the rest), goes as P = M Q [n, r] and
// Q = M^T P [m, r] (two allreduces of (n + m) r elements); the rest is allreduced plainly.
// With error feedback each rank adds last step's compression error to its gradient.
CommHook powersgd_hook(PowerSGDOptions options = {});

// From a command-line spec: "allreduce", "fp16", "bf16", "powersgd:R" or "powersgd:R:START"
// (R the matrix approximation rank, START start_powerSGD_iter, default 1000).
CommHook make_comm_hook(const std::string& spec);

}  // namespace minidl::dist
