// The DDP Reducer (PyTorch's reducer.cpp, simplified): flat per-(dtype, device) gradient
// buckets, a post-accumulate-grad hook per parameter that copies its gradient into the bucket
// pre-divided by the world size and launches the bucket's async allreduce as soon as the
// bucket is full (in bucket-index order on every rank), an end-of-backward callback that waits
// and writes the averaged gradients back, a one-time rebuild of the buckets in the observed
// gradient order, unused-parameter detection and the zero-contribution "shadow" steps of join.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "parallel/ddp/comm_hooks.h"
#include "parallel/process_group/process_group.h"
#include "tensor/tensor.h"

namespace minidl::dist {

struct ReducerOptions {
  int64_t bucket_cap_bytes = 25 << 20;
  int64_t first_bucket_bytes = 1 << 20;
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
};

// Timings of the last synchronised backward (seconds, steady clock), and totals over the
// synchronised backwards since construction or Reducer::reset_totals().
struct ReducerStats {
  int num_buckets = 0;
  double comm_seconds = 0;     // first bucket launch -> all allreduces done
  double exposed_seconds = 0;  // end of backward compute (callback) -> all allreduces done
  int64_t steps = 0;           // synchronised backwards that finished (not join's shadows)
  double total_comm_seconds = 0, total_exposed_seconds = 0;  // sums; 0 at world size 1
  // Payload bytes the bucket collectives (or the comm hook's) carried in the last synchronised
  // backward, and their sum (ProcessGroup::collective_counts() around each launch and wait).
  int64_t bytes = 0, total_bytes = 0;
  double hidden_fraction() const {
    return comm_seconds > 0 ? 1.0 - exposed_seconds / comm_seconds : 0.0;
  }
};

class Reducer : public std::enable_shared_from_this<Reducer> {
 public:
  // params[i] is named names[i]; every rank passes the same list in the same order.
  static std::shared_ptr<Reducer> create(std::vector<Tensor> params, std::vector<std::string> names,
                                         std::shared_ptr<ProcessGroup> group,
                                         const ReducerOptions& options);

  // Called by DDP's forward: fails if the previous synchronised backward did not reduce every
  // parameter, rebuilds the buckets once (collective), and arms the hooks for the next
  // backward when `sync` (no_sync() passes false) and grad mode is on.
  void prepare_for_forward(bool sync);
  // A joined rank's stand-in for one synchronised backward of its peers: allreduces zeros
  // for every bucket (and the unused-parameter map) in the same order.
  void shadow_backward();

  // Called with the error of a failed collective before it is rethrown; may throw a more
  // helpful error instead (DDP names the ranks' step counts).
  void set_failure_handler(std::function<void(const std::exception&)> handler) {
    on_failure_ = std::move(handler);
  }
  // Replaces the bucket allreduce (see parallel/ddp/comm_hooks.h); the hook gets undivided
  // gradients and averages them itself. Once only.
  void set_comm_hook(CommHook hook);
  bool has_comm_hook() const { return bool(comm_hook_); }

  const ReducerStats& stats() const { return stats_; }
  void reset_totals();  // zeroes steps and the total_* sums
  // Bytes of each bucket's flat gradient, in bucket order.
  std::vector<int64_t> bucket_bytes() const;
  // Bucket layout: parameter indices of each bucket, in bucket order.
  std::vector<std::vector<size_t>> bucket_indices() const;

 private:
  struct Bucket {
    Tensor flat;  // [sum of numels], the params' dtype and device
    std::vector<size_t> params;
    std::vector<int64_t> offsets;
    size_t pending = 0;
    std::optional<CommFuture> future;  // the launched allreduce (or comm hook)
  };
  Reducer(std::vector<Tensor> params, std::vector<std::string> names,
          std::shared_ptr<ProcessGroup> group, const ReducerOptions& options);
  void install_hooks();
  void build_buckets(const std::vector<size_t>& order);
  void maybe_rebuild();
  void autograd_hook(size_t i);
  void mark_ready(size_t i);
  void launch_ready_buckets();
  void finalize_backward();
  Tensor slot(size_t i) const;
  std::string unready_names() const;
  void wait(Work& work) const;  // work.wait(), failures through on_failure_
  void launch(size_t index);    // bucket `index`'s allreduce or comm hook
  void wait_bucket(Bucket& b);  // its future; the averaged gradient lands in b.flat
  uint64_t sent_bytes() const { return group_->collective_counts().bytes; }

  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::shared_ptr<ProcessGroup> group_;
  ReducerOptions opts_;
  std::function<void(const std::exception&)> on_failure_;
  CommHook comm_hook_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_, pos_in_bucket_;

  // Per-iteration state.
  bool expect_hooks_ = false;  // armed by prepare_for_forward(sync=true)
  bool in_iteration_ = false;  // a hook of this backward ran and queued the callback
  bool unfinished_ = false;    // the last backward left parameters unreduced
  std::string unfinished_msg_;
  std::vector<char> ready_;
  std::vector<char> used_;  // got a gradient in this backward (find_unused_parameters)
  size_t next_bucket_ = 0;
  int64_t step_bytes_ = 0;          // collective payload of this backward
  std::vector<size_t> grad_order_;  // arrival order in the first synchronised backward
  bool rebuilt_ = false, rebuild_due_ = false;

  using Clock = std::chrono::steady_clock;
  Clock::time_point first_launch_;
  ReducerStats stats_;
};

}  // namespace minidl::dist
