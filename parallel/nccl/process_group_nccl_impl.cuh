// The NCCL process group's class, shared by its two sources: process_group_nccl.cu (communicator
// setup, teardown, waiting) and collectives.cu (the collectives). Internal:
// only those two files include it.
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "parallel/nccl/api.cuh"
#include "parallel/process_group/backend.h"
#include "tensor/cuda_api.h"

#define MINIDL_NCCL_CHECK(call) ::minidl::dist::check_nccl((call), #call, __FILE__, __LINE__)
#define MINIDL_CUDA_CHECK(call) ::minidl::dist::check_cuda((call), #call, __FILE__, __LINE__)

namespace minidl::dist {

void check_nccl(ncclResult_t r, const char* call, const char* file, int line);
void check_cuda(cudaError_t r, const char* call, const char* file, int line);

namespace nccl_detail {

class NcclProcessGroup;

// Done when its event has fired; wait() blocks the host, bounded by the group timeout.
class NcclWork : public Work {
 public:
  NcclWork(NcclProcessGroup* pg, uint64_t seq, std::string op, cudaEvent_t done,
           std::vector<Tensor> keep)
      : pg_(pg), seq_(seq), op_(std::move(op)), done_(done), keep_(std::move(keep)) {}
  ~NcclWork() override { (void)cudaEventDestroy(done_); }
  void wait() override;
  bool is_completed() override;
  uint64_t sequence_number() const override { return seq_; }

 private:
  NcclProcessGroup* pg_;  // the group outlives its work in correct programs (as in c10d)
  uint64_t seq_;
  std::string op_;
  cudaEvent_t done_;
  std::vector<Tensor> keep_;  // tensors in use by the stream
};

class NcclProcessGroup final : public detail::ProcessGroupBase {
 public:
  // Communicator setup and teardown (process_group_nccl.cu).
  NcclProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                   const ProcessGroupOptions& options);
  ~NcclProcessGroup() override;

  std::string backend() const override { return "nccl"; }
  uint64_t sequence_number() const override { return seq_; }

  // For the stall inspector, a collective is in progress from its launch until a wait() or
  // is_completed() sees it done.
  void observed_done(uint64_t seq) { stall_.end(seq); }
  // Blocks until `done` fires or the timeout passes (then aborts the communicator).
  void wait_event(cudaEvent_t done, const std::string& op, uint64_t seq);

  // The collectives (collectives.cu).
  std::shared_ptr<Work> allreduce(Tensor& t, ReduceOp op) override;
  std::shared_ptr<Work> broadcast(Tensor& t, int root) override;
  std::shared_ptr<Work> allgather(std::vector<Tensor>& outputs, const Tensor& input) override;
  std::shared_ptr<Work> reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs,
                                       ReduceOp op) override;
  std::shared_ptr<Work> gather(std::vector<Tensor>& outputs, const Tensor& input,
                               int root) override;
  std::shared_ptr<Work> barrier() override;

 private:
  std::shared_ptr<Work> allreduce_dev(Tensor& t, ReduceOp op);
  std::shared_ptr<Work> broadcast_dev(Tensor& t, int root);
  std::shared_ptr<Work> allgather_dev(std::vector<Tensor>& outputs, const Tensor& input);
  std::shared_ptr<Work> reduce_scatter_dev(Tensor& output, const std::vector<Tensor>& inputs,
                                           ReduceOp op);
  std::shared_ptr<Work> gather_dev(std::vector<Tensor>& outputs, const Tensor& input, int root);
  void check_cuda_tensor(const Tensor& t, const std::string& what) const;

  // minidl's compute stream on this group's device (every minidl kernel runs there).
  cudaStream_t compute_stream() const {
    return static_cast<cudaStream_t>(cuda::current_stream(device_));
  }

  // Orders the group's stream after the compute stream, runs `enqueue` on it, and returns a
  // work whose event fires when the collective is done. `bytes` (counted in
  // collective_counts()): this rank's payload, by default keep[0]'s.
  template <typename F>
  std::shared_ptr<Work> launch(const std::string& op, const std::string& desc,
                               std::vector<Tensor> keep, F&& enqueue,
                               std::optional<uint64_t> bytes = std::nullopt);

  // Exchanges host name and PCI bus id through the store before NCCL init: NCCL would fail
  // later with an obscure error when two ranks share a device.
  void check_one_rank_per_gpu();

  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* barrier_buf_ = nullptr;
  uint64_t seq_ = 0;
  bool broken_ = false;
};

}  // namespace nccl_detail
}  // namespace minidl::dist
