// CUDA kernels: max/min along one dim with int64 indices (torch.max(x, dim)), mirroring
// tensor/cpu/reduce.cpp: the first extreme wins, a NaN counts as the extreme (the first NaN
// wins). Runs on the rows / columns machinery of reduce.cuh.
#include "tensor/cuda/kernels.h"
#include "tensor/cuda/reduce.cuh"
#include "tensor/dispatch.h"

namespace minidl::cuda::reduce_detail {
namespace {

// State (value, index); index -1 means no element yet (then the value is meaningless).
template <typename T>
struct ArgR {
  using V = ExtV<T>;
  struct State {
    V v;
    int64_t i;
  };
  using Acc = State;
  T* values;
  int64_t* indices;
  bool is_max;
  __device__ Acc init() const { return {V(), -1}; }
  // Each thread sees its elements in increasing k: only a strictly better value replaces.
  __device__ Acc step(Acc a, T v, int64_t k) const {
    const V x = V(to_op(v));
    return (a.i < 0 || better(x, a.v, is_max)) ? Acc{x, k} : a;
  }
  __device__ State state(Acc a) const { return a; }
  // Order-free: the better value, on a tie (or two NaNs) the lower index.
  __device__ State merge(State a, State b) const {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    if (better(b.v, a.v, is_max)) return b;
    if (better(a.v, b.v, is_max)) return a;
    return b.i < a.i ? b : a;
  }
  __device__ void write(int64_t o, State s, int64_t) const {
    values[o] = s.i < 0 ? T() : from_op<T>(s.v);
    indices[o] = s.i;
  }
};

template <bool IsMax>
void arg_kernel(const Tensor& in, Tensor& values, Tensor& indices, int64_t dim) {
  if (values.numel() == 0) return;
  TensorDeviceGuard guard(in);
  const Plan p = make_plan(in, in.dim() == 0 ? DimList{} : DimList{dim});
  dispatch_all(in.dtype(), IsMax ? "max" : "min", [&]<typename T>() {
    OutBuffer vb(values, in.dtype()), ib(indices, kInt64);
    launch_reduce<T>(p, ArgR<T>{vb.ptr<T>(), ib.ptr<int64_t>(), IsMax}, in.device().index);
    vb.finish();
    ib.finish();
  });
}

}  // namespace

void register_reduce_arg_kernels() {
  register_kernel<Op::max_dim>(DeviceType::cuda, arg_kernel<true>);
  register_kernel<Op::min_dim>(DeviceType::cuda, arg_kernel<false>);
}

}  // namespace minidl::cuda::reduce_detail
