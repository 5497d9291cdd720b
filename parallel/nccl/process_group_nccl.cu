// NCCL backend, communicator side: one communicator per group (its unique id shared through the
// store, after checking that no two ranks share a GPU), teardown (drained, else aborted), and the
// host-blocking waits bounded by the group timeout. Collectives: collectives.cu.
#include <cuda_runtime.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "parallel/nccl/process_group_nccl.h"
#include "parallel/nccl/process_group_nccl_impl.cuh"
#include "tensor/error.h"

namespace minidl::dist {

void check_nccl(ncclResult_t r, const char* call, const char* file, int line) {
  MINIDL_CHECK(r == ncclSuccess, "NCCL call ", call, " failed at ", file, ":", line, ": ",
               nccl_api().ncclGetErrorString(r));
}

void check_cuda(cudaError_t r, const char* call, const char* file, int line) {
  MINIDL_CHECK(r == cudaSuccess, "CUDA call ", call, " failed at ", file, ":", line, ": ",
               cudaGetErrorString(r));
}

// Whether libnccl loads (it is dlopen'ed on first use: parallel/nccl/api.cuh).
bool nccl_available() {
  try {
    nccl_api();
    return true;
  } catch (const Error&) {
    return false;
  }
}

namespace nccl_detail {
namespace {

std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

}  // namespace

NcclProcessGroup::NcclProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                                   const ProcessGroupOptions& options)
    : ProcessGroupBase(std::move(store), rank, size, options) {
  MINIDL_CUDA_CHECK(cudaGetDevice(&device_));
  check_one_rank_per_gpu();
  ncclUniqueId id;
  if (rank_ == 0) {
    MINIDL_NCCL_CHECK(nccl_api().ncclGetUniqueId(&id));
    store_->set(prefix_ + "nccl_id", Bytes(reinterpret_cast<uint8_t*>(&id),
                                           reinterpret_cast<uint8_t*>(&id) + sizeof(id)));
  } else {
    Bytes b = store_->get(prefix_ + "nccl_id");
    MINIDL_CHECK(b.size() == sizeof(id), "nccl: malformed unique id in the store");
    std::memcpy(&id, b.data(), sizeof(id));
  }
  MINIDL_NCCL_CHECK(nccl_api().ncclCommInitRank(&comm_, size_, id, rank_));
  MINIDL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  MINIDL_CUDA_CHECK(cudaMalloc(&barrier_buf_, sizeof(float)));
  stall_.start("nccl");
}

NcclProcessGroup::~NcclProcessGroup() {
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) (void)cudaGetLastError();
  (void)cudaSetDevice(device_);
  // Queued collectives get the group timeout to finish (a dead peer must not hang the exit);
  // otherwise the communicator is aborted instead of destroyed.
  bool drained = !broken_ && comm_ != nullptr;
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  while (drained) {
    const cudaError_t q = cudaStreamQuery(stream_);
    if (q == cudaSuccess) break;
    (void)cudaGetLastError();
    ncclResult_t async = ncclSuccess;
    (void)nccl_api().ncclCommGetAsyncError(comm_, &async);
    if (q != cudaErrorNotReady || async != ncclSuccess ||
        std::chrono::steady_clock::now() > deadline)
      drained = false;
    else
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (drained)
    (void)nccl_api().ncclCommDestroy(comm_);
  else
    (void)nccl_api().ncclCommAbort(comm_);
  (void)cudaFree(barrier_buf_);
  // stream_ is not destroyed (one stream per group is leaked, as c10d's stream pool never
  // frees its streams): the caching allocator keeps it in the stream uses of the blocks
  // record_stream'ed by our collectives, and records an event on it when such a tensor is
  // freed, which may be long after this group is gone.
  if (previous >= 0) (void)cudaSetDevice(previous);
}

void NcclProcessGroup::wait_event(cudaEvent_t done, const std::string& op, uint64_t seq) {
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  for (;;) {
    cudaError_t q = cudaEventQuery(done);
    if (q == cudaSuccess) break;
    // cudaErrorNotReady is also left as the thread's last error: clear it, or the next kernel
    // launch check (cudaGetLastError) reports "device not ready" for a good launch.
    (void)cudaGetLastError();
    MINIDL_CHECK(q == cudaErrorNotReady, where(op, seq), " failed: ", cudaGetErrorString(q));
    MINIDL_CHECK(comm_ != nullptr, where(op, seq),
                 " failed: the communicator was aborted after an earlier failure");
    ncclResult_t async = ncclSuccess;
    (void)nccl_api().ncclCommGetAsyncError(comm_, &async);
    if (async != ncclSuccess) {
      broken_ = true;
      MINIDL_FAIL(where(op, seq), " failed: ", nccl_api().ncclGetErrorString(async));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      broken_ = true;
      const std::string missing = stall_.diagnose(seq);  // bounded, never throws
      stall_.end(seq, /*completed=*/false);
      (void)nccl_api().ncclCommAbort(comm_);
      comm_ = nullptr;  // freed by the abort (ncclCommAbort/Destroy(nullptr) are no-ops)
      MINIDL_FAIL(where(op, seq), " failed: timed out after ", format_seconds(options_.timeout),
                  missing.empty() ? "; a peer may have died, be slow, or skipped this collective"
                                  : missing);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  stall_.end(seq);
  // Later work on the compute stream is ordered after the collective.
  MINIDL_CUDA_CHECK(cudaStreamWaitEvent(compute_stream(), done, 0));
}

void NcclProcessGroup::check_one_rank_per_gpu() {
  char bus[64] = {};
  MINIDL_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), device_));
  const std::string mine = host_name() + "|" + bus + "|" + std::to_string(device_);
  store_->set(prefix_ + "nccl_dev/" + std::to_string(rank_), mine);
  std::vector<std::string> all;
  for (int r = 0; r < size_; ++r)
    all.push_back(store_->get_string(prefix_ + "nccl_dev/" + std::to_string(r)));
  for (int a = 0; a < size_; ++a)
    for (int b = a + 1; b < size_; ++b) {
      if (all[size_t(a)] != all[size_t(b)]) continue;
      const std::string& s = all[size_t(a)];
      const size_t p1 = s.find('|'), p2 = s.rfind('|');
      MINIDL_FAIL("NCCL cannot run two ranks on one GPU (ranks ", a, " and ", b, " both on GPU ",
                  s.substr(p2 + 1), " ", s.substr(p1 + 1, p2 - p1 - 1),
                  "); use the gloo backend to share a GPU");
    }
}

void NcclWork::wait() {
  pg_->wait_event(done_, op_, seq_);
}

bool NcclWork::is_completed() {
  if (cudaEventQuery(done_) != cudaSuccess) {
    (void)cudaGetLastError();  // not ready: no stale error for the next launch check
    return false;
  }
  pg_->observed_done(seq_);
  return true;
}

}  // namespace nccl_detail

std::shared_ptr<ProcessGroup> make_nccl_process_group(std::shared_ptr<Store> store, int rank,
                                                      int world_size,
                                                      const ProcessGroupOptions& options) {
  return std::make_shared<nccl_detail::NcclProcessGroup>(std::move(store), rank, world_size,
                                                         options);
}

}  // namespace minidl::dist
