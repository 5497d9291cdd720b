// ProcessGroup (c10d's API, simplified to one tensor per call): collectives over the ranks of a
// job, asynchronous work handles, a timeout on every collective, a sequence number per
// collective, and errors that name rank, op and sequence number. Backends: gloo (CPU tensors,
// and CUDA tensors staged through pinned host memory) and nccl (CUDA tensors).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "parallel/store/store.h"
#include "tensor/tensor.h"

namespace minidl::dist {

enum class ReduceOp { sum, avg, max, min };
std::string reduce_op_name(ReduceOp op);

// An issued collective. wait() blocks until it is done (or its timeout passes) and rethrows
// its error; the tensors it writes are valid after wait() returns.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool is_completed() = 0;
  // The collective's sequence number in its group (1, 2, ...).
  virtual uint64_t sequence_number() const = 0;
};

struct ProcessGroupOptions {
  std::chrono::milliseconds timeout = std::chrono::minutes(5);  // per collective
  // Before each collective, check op, dtype and element count against every rank through the
  // store and report both sides on a mismatch (slow; for debugging). Also MINIDL_DIST_DEBUG=1.
  bool debug = false;
  // Stall inspector: each rank publishes the collective it is in; when one has waited this long,
  // rank 0 prints which ranks are in it and which are missing (again at each further multiple),
  // and a timed-out collective's error names the missing ranks. 0 turns it off. Unset:
  // MINIDL_STALL_WARN (seconds), else 60 s.
  std::optional<std::chrono::milliseconds> stall_warn = std::nullopt;
};

// Collectives this rank issued since the group was made, and the payload bytes it passed in
// (allreduce/broadcast: the tensor; allgather/gather: its input; reduce_scatter: its inputs;
// barrier: 0). Wire traffic follows from the algorithm (a ring allreduce sends
// 2 (N-1)/N of the payload); DDP's compression hooks halve the payload.
struct CollectiveCounts {
  uint64_t collectives = 0;
  uint64_t bytes = 0;
};

// Collectives are issued in the same order on every rank (like c10d). Asynchronous ones run on
// the group's communication thread (gloo) or stream (nccl) in issue order. Tensors must be
// contiguous; in-place ops write their argument.
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;       // "gloo" | "nccl"
  virtual uint64_t sequence_number() const = 0;  // of the last collective issued
  virtual CollectiveCounts collective_counts() const = 0;

  // In place: t = op over ranks of t (avg = sum / size, also for integer dtypes: floor).
  virtual std::shared_ptr<Work> allreduce(Tensor& t, ReduceOp op = ReduceOp::sum) = 0;
  // In place: t = root's t.
  virtual std::shared_ptr<Work> broadcast(Tensor& t, int root = 0) = 0;
  // outputs[r] = rank r's input; outputs.size() == size(); dim 0 may differ between ranks
  // (uneven allgather) as long as outputs[r] has rank r's shape.
  virtual std::shared_ptr<Work> allgather(std::vector<Tensor>& outputs, const Tensor& input) = 0;
  // output = op over ranks of inputs[rank()]; inputs.size() == size(), all of output's shape.
  virtual std::shared_ptr<Work> reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs,
                                               ReduceOp op = ReduceOp::sum) = 0;
  // On root: outputs[r] = rank r's input (others pass an empty vector).
  virtual std::shared_ptr<Work> gather(std::vector<Tensor>& outputs, const Tensor& input,
                                       int root = 0) = 0;
  virtual std::shared_ptr<Work> barrier() = 0;
};

}  // namespace minidl::dist
