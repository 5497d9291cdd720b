// What every process-group backend shares (parallel/process_group/backend.h): FutureWork,
// collective descriptions, the debug-mode cross-rank check and per-group key prefixes.
#include <cstdlib>

#include "parallel/process_group/backend.h"
#include "tensor/error.h"

namespace minidl::dist {

namespace detail {

void FutureWork::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool FutureWork::is_completed() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void FutureWork::complete(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

ProcessGroupBase::ProcessGroupBase(std::shared_ptr<Store> store, int rank, int size,
                                   const ProcessGroupOptions& options)
    : store_(std::move(store)),
      rank_(rank),
      size_(size),
      options_(options),
      debug_(debug_enabled(options)),
      prefix_(next_group_prefix(*store_, rank)),
      stall_(store_, prefix_, rank, size, effective_stall_warn(options)) {}

std::string ProcessGroupBase::where(const std::string& op, uint64_t seq) const {
  return backend() + " " + op + " #" + std::to_string(seq) + " (rank " + std::to_string(rank_) +
         " of " + std::to_string(size_) + ")";
}

void ProcessGroupBase::check_root(int root, const char* op) const {
  MINIDL_CHECK(root >= 0 && root < size_, op, ": root ", root, " is not a rank of this group (",
               size_, " ranks)");
}

void ProcessGroupBase::debug_check(uint64_t seq, const std::string& desc) {
  if (debug_) check_same_collective(*store_, prefix_, rank_, size_, seq, desc, options_.timeout);
}

std::string short_dtype_name(DType t) {
  return std::string(dtype_short_name(t));
}

std::string collective_desc(const std::string& op, DType dtype, int64_t numel) {
  return op + "(" + short_dtype_name(dtype) + ", " + std::to_string(numel) + ")";
}

bool debug_enabled(const ProcessGroupOptions& options) {
  if (options.debug) return true;
  const char* env = std::getenv("MINIDL_DIST_DEBUG");
  return env && std::string(env) == "1";
}

void check_same_collective(Store& store, const std::string& prefix, int rank, int size,
                           uint64_t seq, const std::string& desc,
                           std::chrono::milliseconds timeout) {
  const std::string base = prefix + "debug/" + std::to_string(seq) + "/";
  store.set(base + std::to_string(rank), desc);
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(base + std::to_string(r));
  try {
    store.wait(keys, timeout);
  } catch (const Error&) {
    std::string missing;
    for (int r = 0; r < size; ++r)
      if (!store.check({keys[size_t(r)]}))
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    MINIDL_FAIL("rank ", rank, " called ", desc, " at collective #", seq, " but rank(s) [", missing,
                "] did not reach collective #", seq, " within ", format_seconds(timeout));
  }
  // Compare against the lowest rank whose call differs from rank 0's, so that every rank
  // reports the same pair.
  const std::string first = store.get_string(keys[0]);
  for (int r = 1; r < size; ++r) {
    const std::string other = store.get_string(keys[size_t(r)]);
    if (other != first)
      MINIDL_FAIL("collective mismatch: rank 0 called ", first, " but rank ", r, " called ", other,
                  " at collective #", seq);
  }
}

std::string next_group_prefix(Store& store, int rank) {
  const int64_t n = store.add("minidl/pg_count/rank" + std::to_string(rank), 1);
  return "pg" + std::to_string(n) + "/";
}

void check_tensor_arg(const Tensor& t, const std::string& what) {
  MINIDL_CHECK(t.defined(), what, ": undefined tensor");
  MINIDL_CHECK(t.is_contiguous(), what, ": the tensor must be contiguous, got shape ",
               t.shape_str(), " with strides ", shape_str(t.strides()));
  MINIDL_CHECK(t.dtype() != DType::boolean, what, ": bool tensors are not supported (use u8)");
}

}  // namespace detail
}  // namespace minidl::dist
