// Internals shared by the process-group backends (gloo, nccl): a thread-safe Work whose
// completion is signalled by the backend, collective descriptions for error messages, the
// debug-mode cross-rank check through the store, and per-group store key prefixes.
#pragma once
#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "parallel/process_group/process_group.h"
#include "parallel/process_group/stall_inspector.h"

namespace minidl::dist::detail {

// A Work completed by the backend (from its communication thread or a stream callback).
class FutureWork : public Work {
 public:
  explicit FutureWork(uint64_t seq) : seq_(seq) {}
  void wait() override;
  bool is_completed() override;
  uint64_t sequence_number() const override { return seq_; }
  // Marks the work done (error: empty for success) and wakes waiters.
  void complete(std::exception_ptr error = nullptr);

 private:
  uint64_t seq_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

// State and helpers every backend shares: rank, size, options, the store and the group's key
// prefix, the "gloo allreduce #12 (rank 1 of 2)" naming of a collective, and the stall
// inspector (destroyed after the backend's own members, so after its communication thread).
class ProcessGroupBase : public ProcessGroup {
 public:
  ProcessGroupBase(std::shared_ptr<Store> store, int rank, int size,
                   const ProcessGroupOptions& options);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  CollectiveCounts collective_counts() const override {
    return {collectives_.load(), bytes_.load()};
  }

 protected:
  // Called by the backend for every collective it issues (CollectiveCounts).
  void count_collective(uint64_t bytes) {
    ++collectives_;
    bytes_ += bytes;
  }
  std::string where(const std::string& op, uint64_t seq) const;
  void check_root(int root, const char* op) const;
  // Debug mode only: the cross-rank check of collective `seq` (see check_same_collective).
  void debug_check(uint64_t seq, const std::string& desc);

  std::shared_ptr<Store> store_;
  int rank_, size_;
  ProcessGroupOptions options_;
  bool debug_;
  std::string prefix_;    // this group's keys in the store
  StallInspector stall_;  // started by the backend once it is connected
  std::atomic<uint64_t> collectives_{0}, bytes_{0};
};

// Short dtype name for messages ("f32", "bf16", "i64").
std::string short_dtype_name(DType t);
// "allreduce(f32, 100)": what one rank called, compared across ranks in debug mode.
std::string collective_desc(const std::string& op, DType dtype, int64_t numel);

// Whether the debug check runs (options.debug or MINIDL_DIST_DEBUG=1).
bool debug_enabled(const ProcessGroupOptions& options);
// Debug mode: publishes this rank's `desc` for collective `seq` under `prefix` and compares it
// with every rank's. Throws on all ranks alike: "rank 0 called allreduce(f32, 100) but rank 1
// called allreduce(f32, 90) at collective #3", or names the ranks that never arrived.
void check_same_collective(Store& store, const std::string& prefix, int rank, int size,
                           uint64_t seq, const std::string& desc,
                           std::chrono::milliseconds timeout);

// A key prefix unique to this group: the rank's n-th group on this store is "pg<n>/"
// (every rank creates groups in the same order, like c10d).
std::string next_group_prefix(Store& store, int rank);

// Common argument checks: defined, contiguous, dtype supported by the collectives.
void check_tensor_arg(const Tensor& t, const std::string& what);

}  // namespace minidl::dist::detail
