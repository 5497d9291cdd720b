// NCCL backend, collectives: allreduce, broadcast, allgather and gather (grouped send/recv),
// reduce_scatter (grouped reduces) and barrier, each on the group's stream ordered after the
// compute stream by an event; CPU tensors (control values) are staged through the group's device.
#include <cuda_runtime.h>

#include <type_traits>

#include "autograd/grad_mode.h"
#include "parallel/nccl/process_group_nccl_impl.cuh"
#include "tensor/error.h"

namespace minidl::dist::nccl_detail {
namespace {

ncclDataType_t nccl_dtype(DType t) {
  switch (t) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    case DType::u8:
      return ncclUint8;
    default:
      MINIDL_FAIL("nccl: dtype ", t, " is not supported");
  }
}

ncclRedOp_t nccl_op(ReduceOp op, DType t) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return is_floating(t) ? ncclAvg : ncclSum;  // integers: sum, then floor-divide
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  return ncclSum;
}

template <typename T>
__global__ void floor_divide_kernel(T* p, int64_t n, T d) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  T q = p[i] / d;
  if constexpr (std::is_signed_v<T>)
    if (p[i] % d != 0 && p[i] < 0) --q;
  p[i] = q;
}

void floor_divide(void* p, DType t, int64_t n, int d, cudaStream_t s) {
  if (n == 0) return;
  const unsigned blocks = unsigned((n + 255) / 256);
  if (t == DType::i32)
    floor_divide_kernel<int32_t><<<blocks, 256, 0, s>>>(static_cast<int32_t*>(p), n, d);
  else if (t == DType::i64)
    floor_divide_kernel<int64_t><<<blocks, 256, 0, s>>>(static_cast<int64_t*>(p), n, d);
  else
    floor_divide_kernel<uint8_t><<<blocks, 256, 0, s>>>(static_cast<uint8_t*>(p), n, uint8_t(d));
  MINIDL_CUDA_CHECK(cudaGetLastError());
}

// ncclGroupStart/End around `body`. A throwing body (an NCCL call failing inside the group, e.g.
// on a communicator with an async error) still ends the group: left open, it would defer every
// later NCCL call of this thread, on any communicator, which then never runs (a hang).
template <typename F>
void nccl_group(F&& body) {
  MINIDL_NCCL_CHECK(nccl_api().ncclGroupStart());
  try {
    body();
  } catch (...) {
    (void)nccl_api().ncclGroupEnd();
    throw;
  }
  MINIDL_NCCL_CHECK(nccl_api().ncclGroupEnd());
}

// A collective on CPU tensors staged through the group's device: wait() copies the results back.
class StagedWork : public Work {
 public:
  StagedWork(std::shared_ptr<Work> inner, std::vector<std::pair<Tensor, Tensor>> back)
      : inner_(std::move(inner)), back_(std::move(back)) {}
  void wait() override {
    inner_->wait();
    NoGradGuard no_grad;
    for (auto& [host, dev] : back_) host.copy_(dev);
    back_.clear();
  }
  bool is_completed() override { return inner_->is_completed(); }
  uint64_t sequence_number() const override { return inner_->sequence_number(); }

 private:
  std::shared_ptr<Work> inner_;
  std::vector<std::pair<Tensor, Tensor>> back_;  // (CPU tensor, its device copy)
};

// CPU tensors (control values: counts, flags, step numbers from DDP and the metric helpers)
// travel through the group's device, like c10d callers that allocate them there.
class Staging {
 public:
  explicit Staging(int device) : device_(device) {}
  Tensor in(const Tensor& t) {
    NoGradGuard no_grad;
    return t.defined() && t.is_cpu() ? t.to(Device(DeviceType::cuda, device_)) : t;
  }
  Tensor out(const Tensor& t) {
    Tensor d = in(t);
    if (!d.is_same(t)) back_.emplace_back(t, d);
    return d;
  }
  std::shared_ptr<Work> finish(std::shared_ptr<Work> w) {
    if (back_.empty()) return w;
    return std::make_shared<StagedWork>(std::move(w), std::move(back_));
  }

 private:
  int device_;
  std::vector<std::pair<Tensor, Tensor>> back_;
};

}  // namespace

// Declared and described in process_group_nccl_impl.cuh; defined before its uses.
template <typename F>
std::shared_ptr<Work> NcclProcessGroup::launch(const std::string& op, const std::string& desc,
                                               std::vector<Tensor> keep, F&& enqueue,
                                               std::optional<uint64_t> bytes) {
  const uint64_t seq = ++seq_;
  MINIDL_CHECK(!broken_, where(op, seq),
               " not run: the communicator was aborted after an "
               "earlier failure");
  try {
    if (debug_)
      detail::check_same_collective(*store_, prefix_, rank_, size_, seq, desc, options_.timeout);
    cuda::DeviceGuard guard(device_);  // events, kernels and NCCL calls on this device
    cudaEvent_t ready = nullptr, done = nullptr;
    MINIDL_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    MINIDL_CUDA_CHECK(cudaEventRecord(ready, compute_stream()));
    MINIDL_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
    MINIDL_CUDA_CHECK(cudaEventDestroy(ready));
    enqueue();
    // The caching allocator must not hand these blocks to new tensors while NCCL still
    // reads or writes them on the group's stream.
    for (const Tensor& t : keep)
      if (t.defined() && t.storage()->data()) cuda::record_stream(t.storage()->data(), stream_);
    MINIDL_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    MINIDL_CUDA_CHECK(cudaEventRecord(done, stream_));
    const uint64_t payload = bytes                                ? *bytes
                             : keep.empty() || !keep[0].defined() ? 0
                                                                  : uint64_t(keep[0].nbytes());
    count_collective(payload);
    stall_.begin(seq, op, payload);
    return std::make_shared<NcclWork>(this, seq, op, done, std::move(keep));
  } catch (const Error& e) {
    MINIDL_FAIL(where(op, seq), " failed: ", e.what());
  }
}

std::shared_ptr<Work> NcclProcessGroup::allreduce(Tensor& t, ReduceOp op) {
  Staging st(device_);
  Tensor d = st.out(t);
  return st.finish(allreduce_dev(d, op));
}

std::shared_ptr<Work> NcclProcessGroup::broadcast(Tensor& t, int root) {
  Staging st(device_);
  Tensor d = st.out(t);
  return st.finish(broadcast_dev(d, root));
}

std::shared_ptr<Work> NcclProcessGroup::allgather(std::vector<Tensor>& outputs,
                                                  const Tensor& input) {
  Staging st(device_);
  std::vector<Tensor> d;
  for (const Tensor& o : outputs) d.push_back(st.out(o));
  return st.finish(allgather_dev(d, st.in(input)));
}

std::shared_ptr<Work> NcclProcessGroup::reduce_scatter(Tensor& output,
                                                       const std::vector<Tensor>& inputs,
                                                       ReduceOp op) {
  Staging st(device_);
  Tensor d = st.out(output);
  std::vector<Tensor> in;
  for (const Tensor& i : inputs) in.push_back(st.in(i));
  return st.finish(reduce_scatter_dev(d, in, op));
}

std::shared_ptr<Work> NcclProcessGroup::gather(std::vector<Tensor>& outputs, const Tensor& input,
                                               int root) {
  Staging st(device_);
  std::vector<Tensor> d;
  for (const Tensor& o : outputs) d.push_back(st.out(o));
  return st.finish(gather_dev(d, st.in(input), root));
}

// An allreduce of one float (like c10d's NCCL barrier).
std::shared_ptr<Work> NcclProcessGroup::barrier() {
  return launch("barrier", "barrier()", {}, [&] {
    MINIDL_NCCL_CHECK(nccl_api().ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclFloat32, ncclSum,
                                               comm_, stream_));
  });
}

std::shared_ptr<Work> NcclProcessGroup::allreduce_dev(Tensor& t, ReduceOp op) {
  check_cuda_tensor(t, "allreduce");
  return launch("allreduce", detail::collective_desc("allreduce", t.dtype(), t.numel()), {t}, [&] {
    MINIDL_NCCL_CHECK(nccl_api().ncclAllReduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()),
                                               nccl_dtype(t.dtype()), nccl_op(op, t.dtype()), comm_,
                                               stream_));
    if (op == ReduceOp::avg && !is_floating(t.dtype()))
      floor_divide(t.data_ptr(), t.dtype(), t.numel(), size_, stream_);
  });
}

std::shared_ptr<Work> NcclProcessGroup::broadcast_dev(Tensor& t, int root) {
  check_cuda_tensor(t, "broadcast");
  check_root(root, "broadcast");
  return launch("broadcast", detail::collective_desc("broadcast", t.dtype(), t.numel()), {t}, [&] {
    MINIDL_NCCL_CHECK(nccl_api().ncclBroadcast(t.data_ptr(), t.data_ptr(), size_t(t.numel()),
                                               nccl_dtype(t.dtype()), root, comm_, stream_));
  });
}

// Grouped send/recv: works for equal and uneven sizes alike.
std::shared_ptr<Work> NcclProcessGroup::allgather_dev(std::vector<Tensor>& outputs,
                                                      const Tensor& input) {
  check_cuda_tensor(input, "allgather");
  MINIDL_CHECK(outputs.size() == size_t(size_), "allgather: expected ", size_,
               " output tensors, got ", outputs.size());
  for (const Tensor& o : outputs) {
    check_cuda_tensor(o, "allgather output");
    MINIDL_CHECK(o.dtype() == input.dtype(), "allgather: an output has dtype ", o.dtype(),
                 " but the input has ", input.dtype());
  }
  MINIDL_CHECK(outputs[size_t(rank_)].numel() == input.numel(),
               "allgather: this rank's output and input sizes differ");
  std::vector<Tensor> keep{input};  // first: its bytes are counted
  keep.insert(keep.end(), outputs.begin(), outputs.end());
  return launch(
      "allgather", detail::collective_desc("allgather", input.dtype(), input.numel()), keep, [&] {
        MINIDL_CUDA_CHECK(cudaMemcpyAsync(outputs[size_t(rank_)].data_ptr(), input.data_ptr(),
                                          input.nbytes(), cudaMemcpyDeviceToDevice, stream_));
        nccl_group([&] {
          for (int r = 0; r < size_; ++r) {
            if (r == rank_) continue;
            const Tensor& o = outputs[size_t(r)];
            MINIDL_NCCL_CHECK(nccl_api().ncclSend(input.data_ptr(), size_t(input.numel()),
                                                  nccl_dtype(input.dtype()), r, comm_, stream_));
            MINIDL_NCCL_CHECK(nccl_api().ncclRecv(o.data_ptr(), size_t(o.numel()),
                                                  nccl_dtype(o.dtype()), r, comm_, stream_));
          }
        });
      });
}

// One grouped ncclReduce per destination rank.
std::shared_ptr<Work> NcclProcessGroup::reduce_scatter_dev(Tensor& output,
                                                           const std::vector<Tensor>& inputs,
                                                           ReduceOp op) {
  check_cuda_tensor(output, "reduce_scatter");
  MINIDL_CHECK(inputs.size() == size_t(size_), "reduce_scatter: expected ", size_,
               " input tensors, got ", inputs.size());
  for (const Tensor& in : inputs) {
    check_cuda_tensor(in, "reduce_scatter input");
    MINIDL_CHECK(in.numel() == output.numel() && in.dtype() == output.dtype(),
                 "reduce_scatter: inputs must match the output's size and dtype");
  }
  std::vector<Tensor> keep(inputs);
  keep.push_back(output);
  return launch(
      "reduce_scatter", detail::collective_desc("reduce_scatter", output.dtype(), output.numel()),
      keep,
      [&] {
        nccl_group([&] {
          for (int r = 0; r < size_; ++r) {
            void* recv = r == rank_ ? output.data_ptr() : inputs[size_t(r)].data_ptr();
            MINIDL_NCCL_CHECK(nccl_api().ncclReduce(
                inputs[size_t(r)].data_ptr(), recv, size_t(output.numel()),
                nccl_dtype(output.dtype()), nccl_op(op, output.dtype()), r, comm_, stream_));
          }
        });
        if (op == ReduceOp::avg && !is_floating(output.dtype()))
          floor_divide(output.data_ptr(), output.dtype(), output.numel(), size_, stream_);
      },
      output.nbytes() * uint64_t(size_));
}

std::shared_ptr<Work> NcclProcessGroup::gather_dev(std::vector<Tensor>& outputs,
                                                   const Tensor& input, int root) {
  check_cuda_tensor(input, "gather");
  check_root(root, "gather");
  if (rank_ == root) {
    MINIDL_CHECK(outputs.size() == size_t(size_), "gather: the root expects ", size_,
                 " output tensors, got ", outputs.size());
    for (const Tensor& o : outputs) {
      check_cuda_tensor(o, "gather output");
      MINIDL_CHECK(o.numel() == input.numel() && o.dtype() == input.dtype(), "gather: output ",
                   o.shape_str(), " ", o.dtype(), " does not match the input ", input.shape_str(),
                   " ", input.dtype(), " (gather needs equal sizes)");
    }
  }
  std::vector<Tensor> keep{input};  // first: its bytes are counted
  keep.insert(keep.end(), outputs.begin(), outputs.end());
  return launch(
      "gather", detail::collective_desc("gather", input.dtype(), input.numel()), keep, [&] {
        const size_t n = size_t(input.numel());
        const ncclDataType_t dt = nccl_dtype(input.dtype());
        nccl_group([&] {
          if (rank_ != root) {
            MINIDL_NCCL_CHECK(nccl_api().ncclSend(input.data_ptr(), n, dt, root, comm_, stream_));
          } else {
            for (int r = 0; r < size_; ++r)
              if (r != rank_)
                MINIDL_NCCL_CHECK(
                    nccl_api().ncclRecv(outputs[size_t(r)].data_ptr(), n, dt, r, comm_, stream_));
          }
        });
        if (rank_ == root)
          MINIDL_CUDA_CHECK(cudaMemcpyAsync(outputs[size_t(rank_)].data_ptr(), input.data_ptr(),
                                            input.nbytes(), cudaMemcpyDeviceToDevice, stream_));
      });
}

void NcclProcessGroup::check_cuda_tensor(const Tensor& t, const std::string& what) const {
  detail::check_tensor_arg(t, what);
  MINIDL_CHECK(t.is_cuda() && t.device().index == device_, "nccl ", what,
               ": expected a tensor on cuda:", device_, ", got one on ", t.device(),
               " (CPU tensors are staged through it)");
}

}  // namespace minidl::dist::nccl_detail
