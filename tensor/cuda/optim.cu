// Fused multi-tensor SGD and Adam(W) steps (optim/fused.h), PyTorch's multi_tensor_apply: the
// pointers and sizes of up to 48 (36 for 4-5 lists) tensors and a table of up to 320
// (tensor, chunk) blocks travel in the kernel's argument struct, so a group takes a few launches.
// Capturable: hyper-parameters and step counts are read from device memory by the kernels.
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <cmath>
#include <map>

#include "optim/fused.h"
#include "tensor/cuda.h"
#include "tensor/cuda/common.cuh"

namespace minidl::optim::fused {

// The device copy of a group's hyper-parameters (f64 [8]) and how to read the host values.
struct Hyper {
  std::function<HyperValues()> read;
  Tensor dev;
};

HyperHandle make_hyper(std::function<HyperValues()> read) {
  auto h = std::make_shared<Hyper>();
  h->read = std::move(read);
  return h;
}

}  // namespace minidl::optim::fused

namespace minidl::cuda {
namespace {

constexpr int kChunk = 65536;  // elements per block
constexpr int kILP = 4;        // elements per thread per iteration
constexpr int kThreads = 512;
constexpr int kMaxBlocks = 320;
constexpr int kMaxSteps = 256;  // step counters per increment launch

// Kernel argument: Depth lists (params, grads, state...) of up to kMaxTensors tensors and the
// (tensor, chunk) of each block. Stays below the classic 4 KiB kernel-parameter limit.
template <int Depth>
struct TensorListArgs {
  static constexpr int kMaxTensors = Depth <= 3 ? 48 : 36;
  void* ptr[Depth][kMaxTensors];
  int64_t numel[kMaxTensors];
  const double* step[kMaxTensors];  // Adam: the tensor's (already incremented) step count
  uint8_t first[kMaxTensors];       // SGD: momentum buffer is initialised by this step
  uint8_t block_tensor[kMaxBlocks];
  int32_t block_chunk[kMaxBlocks];
};
static_assert(sizeof(TensorListArgs<5>) <= 4096 && sizeof(TensorListArgs<3>) <= 4096);

// IEEE round-to-nearest arithmetic that nvcc never contracts into an FMA, so f32/f64 results
// equal the CPU's op-by-op results (one rounding per tensor op).
__device__ __forceinline__ float mul_rn(float a, float b) {
  return __fmul_rn(a, b);
}
__device__ __forceinline__ double mul_rn(double a, double b) {
  return __dmul_rn(a, b);
}
__device__ __forceinline__ float add_rn(float a, float b) {
  return __fadd_rn(a, b);
}
__device__ __forceinline__ double add_rn(double a, double b) {
  return __dadd_rn(a, b);
}
__device__ __forceinline__ float div_rn(float a, float b) {
  return __fdiv_rn(a, b);
}
__device__ __forceinline__ double div_rn(double a, double b) {
  return __ddiv_rn(a, b);
}
__device__ __forceinline__ float sqrt_rn(float a) {
  return __fsqrt_rn(a);
}
__device__ __forceinline__ double sqrt_rn(double a) {
  return __dsqrt_rn(a);
}

template <typename T>
struct alignas(sizeof(T) * kILP) Vec {
  T v[kILP];
};

// Runs op on this block's chunk: r[d][k] holds element k of list d in opmath; every list but
// the grads (list 1) is written back. 16-byte style vector loads when all lists are aligned.
template <typename T, int Depth, typename Op>
__device__ __forceinline__ void chunk_apply(const TensorListArgs<Depth>& a, const Op& op) {
  using C = opmath_t<T>;
  const int ti = a.block_tensor[blockIdx.x];
  const int64_t start = int64_t(a.block_chunk[blockIdx.x]) * kChunk;
  const int64_t rest = a.numel[ti] - start;
  const int len = int(rest < kChunk ? rest : kChunk);
  T* p[Depth];
  bool aligned = true;
#pragma unroll
  for (int d = 0; d < Depth; ++d) {
    p[d] = static_cast<T*>(a.ptr[d][ti]) + start;
    aligned = aligned && reinterpret_cast<uintptr_t>(p[d]) % sizeof(Vec<T>) == 0;
  }
  C r[Depth][kILP] = {};
  if (aligned) {
    const int nvec = len / kILP;
    for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
#pragma unroll
      for (int d = 0; d < Depth; ++d) {
        const Vec<T> x = reinterpret_cast<const Vec<T>*>(p[d])[v];
#pragma unroll
        for (int k = 0; k < kILP; ++k) r[d][k] = to_op(x.v[k]);
      }
      op(r);
#pragma unroll
      for (int d = 0; d < Depth; ++d) {
        if (d == 1) continue;
        Vec<T> x;
#pragma unroll
        for (int k = 0; k < kILP; ++k) x.v[k] = from_op<T>(r[d][k]);
        reinterpret_cast<Vec<T>*>(p[d])[v] = x;
      }
    }
    for (int i = nvec * kILP + threadIdx.x; i < len; i += blockDim.x) {  // < kILP tail elements
#pragma unroll
      for (int d = 0; d < Depth; ++d) r[d][0] = to_op(p[d][i]);
      op(r);
#pragma unroll
      for (int d = 0; d < Depth; ++d)
        if (d != 1) p[d][i] = from_op<T>(r[d][0]);
    }
    return;
  }
  for (int base = 0; base < len; base += blockDim.x * kILP) {
#pragma unroll
    for (int k = 0; k < kILP; ++k) {
      const int i = base + threadIdx.x + k * blockDim.x;
#pragma unroll
      for (int d = 0; d < Depth; ++d) r[d][k] = i < len ? to_op(p[d][i]) : C(0);
    }
    op(r);
#pragma unroll
    for (int k = 0; k < kILP; ++k) {
      const int i = base + threadIdx.x + k * blockDim.x;
      if (i >= len) continue;
#pragma unroll
      for (int d = 0; d < Depth; ++d)
        if (d != 1) p[d][i] = from_op<T>(r[d][k]);
    }
  }
}

// optim/sgd.cpp: d = g + wd*p; buf = first ? d : momentum*buf + (1-dampening)*d;
// d = nesterov ? d + momentum*buf : buf; p = p + (-lr)*d. Lists: p, g[, buf].
template <typename C, int Depth>
struct SgdOp {
  C wd, momentum, damp1, neg_lr;
  bool has_wd, nesterov, first;
  __device__ void operator()(C (&r)[Depth][kILP]) const {
#pragma unroll
    for (int k = 0; k < kILP; ++k) {
      const C p = r[0][k];
      C d = r[1][k];
      if (has_wd) d = add_rn(d, mul_rn(p, wd));
      if constexpr (Depth == 3) {
        const C buf = first ? d : add_rn(mul_rn(r[2][k], momentum), mul_rn(d, damp1));
        r[2][k] = buf;
        d = nesterov ? add_rn(d, mul_rn(buf, momentum)) : buf;
      }
      r[0][k] = add_rn(p, mul_rn(d, neg_lr));
    }
  }
};

// hyper: {lr, momentum, dampening, weight_decay}
template <typename T, int Depth>
__global__ void __launch_bounds__(kThreads)
    sgd_kernel(TensorListArgs<Depth> a, const double* hyper, bool nesterov) {
  using C = opmath_t<T>;
  const double lr = hyper[0], momentum = hyper[1], dampening = hyper[2], wd = hyper[3];
  const SgdOp<C, Depth> op{C(wd),
                           C(momentum),
                           C(1.0 - dampening),
                           C(-lr),
                           wd != 0.0,
                           nesterov,
                           a.first[a.block_tensor[blockIdx.x]] != 0};
  chunk_apply<T, Depth>(a, op);
}

// optim/adam.cpp: p *= 1 - lr*wd (AdamW) or g += wd*p (Adam); m = b1*m + (1-b1)*g;
// v = b2*v + (1-b2)*g*g; vmax = max(vmax, v); denom = sqrt(v or vmax)/sqrt(1-b2^t) + eps;
// p = p + (-lr/(1-b1^t)) * (m/denom). Lists: p, g, m, v[, vmax].
template <typename C, int Depth>
struct AdamOp {
  C decay, wd, b1, omb1, b2, omb2, bc2_sqrt, eps, step_size;
  bool decoupled, has_wd;
  __device__ void operator()(C (&r)[Depth][kILP]) const {
#pragma unroll
    for (int k = 0; k < kILP; ++k) {
      C p = r[0][k], g = r[1][k];
      if (decoupled)
        p = mul_rn(p, decay);
      else if (has_wd)
        g = add_rn(g, mul_rn(p, wd));
      const C m = add_rn(mul_rn(r[2][k], b1), mul_rn(g, omb1));
      const C v = add_rn(mul_rn(r[3][k], b2), mul_rn(mul_rn(g, g), omb2));
      C top = v;
      if constexpr (Depth == 5) {
        const C vm = r[4][k];
        top = (vm != vm || vm > v) ? vm : v;  // maximum(vmax, v), NaN-propagating
        r[4][k] = top;
      }
      const C denom = add_rn(div_rn(sqrt_rn(top), bc2_sqrt), eps);
      r[0][k] = add_rn(p, mul_rn(div_rn(m, denom), step_size));
      r[2][k] = m;
      r[3][k] = v;
    }
  }
};

// hyper: {lr, beta1, beta2, eps, weight_decay}
template <typename T, int Depth>
__global__ void __launch_bounds__(kThreads)
    adam_kernel(TensorListArgs<Depth> a, const double* hyper, bool decoupled) {
  using C = opmath_t<T>;
  const double lr = hyper[0], b1 = hyper[1], b2 = hyper[2], eps = hyper[3], wd = hyper[4];
  const double t = *a.step[a.block_tensor[blockIdx.x]];
  const double bc1 = 1.0 - ::pow(b1, t), bc2_sqrt = sqrt_rn(1.0 - ::pow(b2, t));
  const AdamOp<C, Depth> op{C(__dadd_rn(1.0, -__dmul_rn(lr, wd))),
                            C(wd),
                            C(b1),
                            C(1.0 - b1),
                            C(b2),
                            C(1.0 - b2),
                            C(bc2_sqrt),
                            C(eps),
                            C(__ddiv_rn(-lr, bc1)),
                            decoupled,
                            wd != 0.0};
  chunk_apply<T, Depth>(a, op);
}

struct StepList {
  double* p[kMaxSteps];
  int n;
};
__global__ void increment_steps(StepList s) {
  const int i = threadIdx.x;
  if (i < s.n) *s.p[i] += 1.0;
}

// Packs lists[d][i] (tensors with numel > 0) into TensorListArgs and calls launch(args, blocks)
// whenever the tensor or block table is full, and once at the end.
template <int Depth, typename Launch>
void multi_tensor_apply(const std::array<const std::vector<Tensor>*, Depth>& lists,
                        const std::vector<Tensor>* steps, const std::vector<uint8_t>* first,
                        Launch launch) {
  using Args = TensorListArgs<Depth>;
  Args a{};
  int nt = 0, nb = 0;
  const std::vector<Tensor>& params = *lists[0];
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t numel = params[i].numel();
    if (numel == 0) continue;
    for (int d = 0; d < Depth; ++d) a.ptr[d][nt] = (*lists[d])[i].data_ptr();
    a.numel[nt] = numel;
    a.step[nt] = steps ? static_cast<const double*>((*steps)[i].data_ptr()) : nullptr;
    a.first[nt] = first ? (*first)[i] : 0;
    ++nt;
    const int64_t chunks = (numel + kChunk - 1) / kChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      a.block_tensor[nb] = uint8_t(nt - 1);
      a.block_chunk[nb] = int32_t(c);
      ++nb;
      const bool last_chunk = c == chunks - 1;
      if (nb < kMaxBlocks && !(nt == Args::kMaxTensors && last_chunk)) continue;
      launch(a, nb);
      nb = 0;
      if (last_chunk) {
        nt = 0;
      } else {  // the tensor goes on in the next launch as tensor 0
        for (int d = 0; d < Depth; ++d) a.ptr[d][0] = a.ptr[d][nt - 1];
        a.numel[0] = a.numel[nt - 1];
        a.step[0] = a.step[nt - 1];
        a.first[0] = a.first[nt - 1];
        nt = 1;
      }
    }
  }
  if (nb > 0) launch(a, nb);
}

// Indices of `params` grouped by dtype (a group may mix f32 and f16 parameters).
std::map<DType, std::vector<size_t>> by_dtype(const std::vector<Tensor>& params) {
  std::map<DType, std::vector<size_t>> out;
  for (size_t i = 0; i < params.size(); ++i) out[params[i].dtype()].push_back(i);
  return out;
}

std::vector<Tensor> pick(const std::vector<Tensor>& v, const std::vector<size_t>& idx) {
  std::vector<Tensor> out;
  if (v.empty()) return out;
  for (size_t i : idx) out.push_back(v[i]);
  return out;
}

void check_state(const std::vector<Tensor>& state, const std::vector<Tensor>& params,
                 const char* op, const char* what) {
  MINIDL_CHECK(state.size() == params.size(), op, ": ", state.size(), " ", what, " tensor(s) for ",
               params.size(), " parameter(s)");
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& s = state[i];
    const Tensor& p = params[i];
    MINIDL_CHECK(s.defined() && s.device() == p.device() && s.dtype() == p.dtype() &&
                     s.shape() == p.shape() && s.is_contiguous(),
                 op, ": ", what, " ", i, " must be a contiguous ", p.dtype(), " tensor of shape ",
                 p.shape_str(), " on ", p.device());
  }
}

// Uploads the group's host values now, or (while capturing) before every replay.
const double* prepare_hyper(const optim::fused::HyperHandle& h, const Tensor& like) {
  using optim::fused::Hyper;
  const Device dev = like.device();
  if (!h->dev.defined() || h->dev.device() != dev) h->dev = empty({8}, kFloat64, dev);
  auto upload = [](Hyper& hy) {
    const optim::fused::HyperValues v = hy.read();
    TensorDeviceGuard guard(hy.dev);
    // Pageable source: staged before the call returns, ordered before the kernels.
    MINIDL_CUDA_CHECK(cudaMemcpyAsync(hy.dev.data_ptr(), v.data(), sizeof(v),
                                      cudaMemcpyHostToDevice, stream_of(hy.dev)));
  };
  if (is_capturing(dev.index)) {
    std::weak_ptr<Hyper> weak = h;
    add_replay_hook([weak, upload] {
      if (auto s = weak.lock()) upload(*s);
    });
  } else {
    upload(*h);
  }
  return static_cast<const double*>(h->dev.data_ptr());
}

}  // namespace
}  // namespace minidl::cuda

namespace minidl::optim::fused {
using namespace minidl::cuda;

bool usable(const std::vector<Tensor>& params) {
  if (params.empty()) return false;
  const Device dev = params[0].device();
  for (const Tensor& p : params) {
    if (!p.defined() || !p.is_cuda() || p.device() != dev || !p.is_floating_point() ||
        !p.is_contiguous())
      return false;
    const Tensor& g = p.grad();
    if (!g.defined() || g.device() != dev || g.dtype() != p.dtype() || g.shape() != p.shape() ||
        !g.is_contiguous())
      return false;
  }
  return true;
}

void sgd_step(const HyperHandle& hyper, bool nesterov, const std::vector<Tensor>& params,
              const std::vector<Tensor>& grads, const std::vector<Tensor>& bufs,
              const std::vector<uint8_t>& first) {
  if (params.empty()) return;
  MINIDL_CHECK(usable(params),
               "fused sgd_step: parameters must be contiguous floating CUDA "
               "tensors on one device with matching grads");
  check_state(grads, params, "fused sgd_step", "grad");
  const bool momentum = !bufs.empty();
  if (momentum) check_state(bufs, params, "fused sgd_step", "momentum_buffer");
  MINIDL_CHECK(!momentum || first.size() == params.size(), "fused sgd_step: ", first.size(),
               " first-step flags for ", params.size(), " parameter(s)");
  TensorDeviceGuard guard(params[0]);
  const cudaStream_t stream = stream_of(params[0]);
  const double* h = prepare_hyper(hyper, params[0]);
  for (const auto& [dt, idx] : by_dtype(params)) {
    const std::vector<Tensor> p = pick(params, idx), g = pick(grads, idx), b = pick(bufs, idx);
    std::vector<uint8_t> f;
    for (size_t i : idx) f.push_back(momentum ? first[i] : 0);
    dispatch_floating(dt, "fused sgd_step", [&]<typename T>() {
      if (momentum) {
        multi_tensor_apply<3>({&p, &g, &b}, nullptr, &f, [&](const auto& a, int blocks) {
          sgd_kernel<T, 3><<<blocks, kThreads, 0, stream>>>(a, h, nesterov);
          MINIDL_CUDA_LAUNCH_CHECK();
        });
      } else {
        multi_tensor_apply<2>({&p, &g}, nullptr, nullptr, [&](const auto& a, int blocks) {
          sgd_kernel<T, 2><<<blocks, kThreads, 0, stream>>>(a, h, nesterov);
          MINIDL_CUDA_LAUNCH_CHECK();
        });
      }
    });
  }
}

void adam_step(const HyperHandle& hyper, bool decoupled, const std::vector<Tensor>& params,
               const std::vector<Tensor>& grads, const std::vector<Tensor>& m,
               const std::vector<Tensor>& v, const std::vector<Tensor>& vmax,
               const std::vector<Tensor>& steps) {
  if (params.empty()) return;
  MINIDL_CHECK(usable(params),
               "fused adam_step: parameters must be contiguous floating CUDA "
               "tensors on one device with matching grads");
  const char* op = "fused adam_step";
  check_state(grads, params, op, "grad");
  check_state(m, params, op, "exp_avg");
  check_state(v, params, op, "exp_avg_sq");
  const bool amsgrad = !vmax.empty();
  if (amsgrad) check_state(vmax, params, op, "max_exp_avg_sq");
  MINIDL_CHECK(steps.size() == params.size(), op, ": ", steps.size(), " step tensor(s) for ",
               params.size(), " parameter(s)");
  for (size_t i = 0; i < steps.size(); ++i)
    MINIDL_CHECK(steps[i].defined() && steps[i].numel() == 1 && steps[i].dtype() == kFloat64 &&
                     steps[i].device() == params[i].device(),
                 op, ": step ", i, " must be a one-element f64 tensor on ", params[i].device());
  TensorDeviceGuard guard(params[0]);
  const cudaStream_t stream = stream_of(params[0]);
  const double* h = prepare_hyper(hyper, params[0]);
  // Steps first (every block of a tensor then reads the same new count).
  for (size_t s = 0; s < steps.size(); s += kMaxSteps) {
    StepList list{};
    for (size_t i = s; i < steps.size() && list.n < kMaxSteps; ++i)
      list.p[list.n++] = static_cast<double*>(steps[i].data_ptr());
    increment_steps<<<1, kMaxSteps, 0, stream>>>(list);
    MINIDL_CUDA_LAUNCH_CHECK();
  }
  for (const auto& [dt, idx] : by_dtype(params)) {
    const std::vector<Tensor> p = pick(params, idx), g = pick(grads, idx), mm = pick(m, idx),
                              vv = pick(v, idx), vx = pick(vmax, idx), st = pick(steps, idx);
    dispatch_floating(dt, op, [&]<typename T>() {
      if (amsgrad) {
        multi_tensor_apply<5>({&p, &g, &mm, &vv, &vx}, &st, nullptr,
                              [&](const auto& a, int blocks) {
                                adam_kernel<T, 5><<<blocks, kThreads, 0, stream>>>(a, h, decoupled);
                                MINIDL_CUDA_LAUNCH_CHECK();
                              });
      } else {
        multi_tensor_apply<4>({&p, &g, &mm, &vv}, &st, nullptr, [&](const auto& a, int blocks) {
          adam_kernel<T, 4><<<blocks, kThreads, 0, stream>>>(a, h, decoupled);
          MINIDL_CUDA_LAUNCH_CHECK();
        });
      }
    });
  }
}

}  // namespace minidl::optim::fused
