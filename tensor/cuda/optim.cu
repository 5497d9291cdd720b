// Fused multi-tensor SGD and Adam(W) steps, the fused_sgd / fused_adam ops, and clip_grad_norm_'s
// foreach_norm / foreach_clip_by_norm (frontends in optim/fused.h; multi-tensor machinery in
// multi_tensor.cuh). Capturable: hyper-parameters, step counts, the AMP inputs (grad_scale,
// found_inf) and the clipping norm are read from device memory.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <utility>

#include "tensor/cuda_api.h"
#include "tensor/cuda/runtime/common.cuh"
#include "tensor/cuda/kernels.h"
#include "tensor/cuda/multi_tensor.cuh"
#include "tensor/dispatch.h"
#include "tensor/ops.h"

namespace minidl::cuda {
namespace {
using namespace mta;

constexpr int kMaxSteps = 256;  // step counters per increment launch

// optim/sgd.cpp: d = g + wd*p; buf = first ? d : momentum*buf + (1-dampening)*d;
// d = nesterov ? d + momentum*buf : buf; p = p + (-lr)*d. Lists: p, g[, buf].
template <typename C, int Depth>
struct SgdOp {
  C wd, momentum, damp1, neg_lr, scale;
  bool has_wd, nesterov, first, has_scale;
  __device__ void operator()(C (&r)[Depth][kILP]) const {
#pragma unroll
    for (int k = 0; k < kILP; ++k) {
      const C p = r[0][k];
      C d = r[1][k];
      if (has_scale) d = div_rn(d, scale);
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
    sgd_kernel(TensorListArgs<Depth> a, const double* hyper, bool nesterov, const float* grad_scale,
               const float* found_inf) {
  using C = opmath_t<T>;
  if (found_inf && *found_inf != 0.0f) return;  // AMP: inf/NaN in the grads, skip the step
  const double lr = hyper[0], momentum = hyper[1], dampening = hyper[2], wd = hyper[3];
  const SgdOp<C, Depth> op{C(wd),
                           C(momentum),
                           C(1.0 - dampening),
                           C(-lr),
                           grad_scale ? C(*grad_scale) : C(1),
                           wd != 0.0,
                           nesterov,
                           a.first[a.block_tensor[blockIdx.x]] != 0,
                           grad_scale != nullptr};
  chunk_apply<T, Depth>(a, op);
}

// optim/adam.cpp: p *= 1 - lr*wd (AdamW) or g += wd*p (Adam); m = b1*m + (1-b1)*g;
// v = b2*v + (1-b2)*g*g; vmax = max(vmax, v); denom = sqrt(v or vmax)/sqrt(1-b2^t) + eps;
// p = p + (-lr/(1-b1^t)) * (m/denom). Lists: p, g, m, v[, vmax].
template <typename C, int Depth>
struct AdamOp {
  C decay, wd, b1, omb1, b2, omb2, bc2_sqrt, eps, step_size, scale;
  bool decoupled, has_wd, has_scale;
  __device__ void operator()(C (&r)[Depth][kILP]) const {
#pragma unroll
    for (int k = 0; k < kILP; ++k) {
      C p = r[0][k], g = r[1][k];
      if (has_scale) g = div_rn(g, scale);
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
    adam_kernel(TensorListArgs<Depth> a, const double* hyper, bool decoupled,
                const float* grad_scale, const float* found_inf) {
  using C = opmath_t<T>;
  if (found_inf && *found_inf != 0.0f) return;
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
                            grad_scale ? C(*grad_scale) : C(1),
                            decoupled,
                            wd != 0.0,
                            grad_scale != nullptr};
  chunk_apply<T, Depth>(a, op);
}

struct StepList {
  double* p[kMaxSteps];
  int n;
};
__global__ void increment_steps(StepList s, const float* found_inf) {
  if (found_inf && *found_inf != 0.0f) return;
  const int i = threadIdx.x;
  if (i < s.n) *s.p[i] += 1.0;
}

// Uploads the group's host values now, or (while capturing) before every replay.
const double* prepare_hyper(const std::shared_ptr<FusedHyper>& h, const Tensor& like) {
  using Hyper = FusedHyper;
  const Device dev = like.device();
  if (!h->dev.defined() || h->dev.device() != dev) h->dev = empty({8}, kFloat64, dev);
  auto upload = [](Hyper& hy) {
    const std::array<double, 8> v = hy.read();
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

const float* f32_ptr(const Tensor& t) {
  return t.defined() ? static_cast<const float*>(t.data_ptr()) : nullptr;
}

void fused_sgd_kernel(const FusedSgdArgs& args) {
  const std::vector<Tensor>& params = args.params;
  const bool momentum = !args.bufs.empty();
  TensorDeviceGuard guard(params[0]);
  const cudaStream_t stream = stream_of(params[0]);
  const double* h = prepare_hyper(args.hyper, params[0]);
  const float* gs = f32_ptr(args.amp.grad_scale);
  const float* fi = f32_ptr(args.amp.found_inf);
  const bool nesterov = args.nesterov;
  for (const auto& [dt, idx] : by_dtype(params)) {
    const std::vector<Tensor> p = pick(params, idx), g = pick(args.grads, idx),
                              b = pick(args.bufs, idx);
    std::vector<uint8_t> f;
    for (size_t i : idx) f.push_back(momentum ? args.first[i] : 0);
    dispatch_floating(dt, "fused_sgd", [&]<typename T>() {
      if (momentum) {
        multi_tensor_apply<3>({&p, &g, &b}, nullptr, &f, [&](const auto& a, int blocks) {
          sgd_kernel<T, 3><<<blocks, kThreads, 0, stream>>>(a, h, nesterov, gs, fi);
          MINIDL_CUDA_LAUNCH_CHECK();
        });
      } else {
        multi_tensor_apply<2>({&p, &g}, nullptr, nullptr, [&](const auto& a, int blocks) {
          sgd_kernel<T, 2><<<blocks, kThreads, 0, stream>>>(a, h, nesterov, gs, fi);
          MINIDL_CUDA_LAUNCH_CHECK();
        });
      }
    });
  }
}

void fused_adam_kernel(const FusedAdamArgs& args) {
  const std::vector<Tensor>& params = args.params;
  const std::vector<Tensor>& steps = args.steps;
  const bool amsgrad = !args.max_exp_avg_sq.empty();
  TensorDeviceGuard guard(params[0]);
  const cudaStream_t stream = stream_of(params[0]);
  const double* h = prepare_hyper(args.hyper, params[0]);
  const float* gs = f32_ptr(args.amp.grad_scale);
  const float* fi = f32_ptr(args.amp.found_inf);
  const bool decoupled = args.decoupled;
  // Steps first (every block of a tensor then reads the same new count).
  for (size_t s = 0; s < steps.size(); s += kMaxSteps) {
    StepList list{};
    for (size_t i = s; i < steps.size() && list.n < kMaxSteps; ++i)
      list.p[list.n++] = static_cast<double*>(steps[i].data_ptr());
    increment_steps<<<1, kMaxSteps, 0, stream>>>(list, fi);
    MINIDL_CUDA_LAUNCH_CHECK();
  }
  for (const auto& [dt, idx] : by_dtype(params)) {
    const std::vector<Tensor> p = pick(params, idx), g = pick(args.grads, idx),
                              mm = pick(args.exp_avg, idx), vv = pick(args.exp_avg_sq, idx),
                              vx = pick(args.max_exp_avg_sq, idx), st = pick(steps, idx);
    dispatch_floating(dt, "fused_adam", [&]<typename T>() {
      if (amsgrad) {
        multi_tensor_apply<5>(
            {&p, &g, &mm, &vv, &vx}, &st, nullptr, [&](const auto& a, int blocks) {
              adam_kernel<T, 5><<<blocks, kThreads, 0, stream>>>(a, h, decoupled, gs, fi);
              MINIDL_CUDA_LAUNCH_CHECK();
            });
      } else {
        multi_tensor_apply<4>({&p, &g, &mm, &vv}, &st, nullptr, [&](const auto& a, int blocks) {
          adam_kernel<T, 4><<<blocks, kThreads, 0, stream>>>(a, h, decoupled, gs, fi);
          MINIDL_CUDA_LAUNCH_CHECK();
        });
      }
    });
  }
  // The parameters' copies (autocast's), after the update on the same stream: one list copy.
  std::vector<Tensor> copies, sources;
  for (size_t i = 0; i < args.param_copies.size(); ++i)
    if (args.param_copies[i].defined()) {
      copies.push_back(args.param_copies[i]);
      sources.push_back(native::view(params[i], args.param_copies[i].shape()));
    }
  if (!copies.empty()) native::foreach_copy_(copies, sources);
}

// ---- clip_grad_norm_: foreach_norm (chunk partials, then one block sums them in order) and
// foreach_clip_by_norm.
enum NormMode : int { kNormInf = 0, kNormL1 = 1, kNormL2 = 2, kNormP = 3 };

__device__ __forceinline__ double norm_combine(double acc, double v, int mode) {
  if (mode != kNormInf) return acc + v;
  return isnan(acc) || isnan(v) ? acc + v : fmax(acc, v);  // NaN wins
}

// Tree reduction of one value per thread over the block, in a fixed order; thread 0 gets it.
__device__ double block_combine(double v, int mode) {
  __shared__ double sh[kThreads];
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] = norm_combine(sh[threadIdx.x], sh[threadIdx.x + s], mode);
    __syncthreads();
  }
  return sh[0];
}

// partial[blockIdx.x] = sum |x|^p (or max |x|) over this block's chunk, in f64.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    norm_partial_kernel(TensorListArgs<1> a, double p, int mode, double* partial) {
  const int ti = a.block_tensor[blockIdx.x];
  const int64_t start = int64_t(a.block_chunk[blockIdx.x]) * kChunk;
  const int64_t rest = a.numel[ti] - start;
  const int len = int(rest < kChunk ? rest : kChunk);
  const T* x = static_cast<const T*>(a.ptr[0][ti]) + start;
  double acc = 0;
  for (int i = threadIdx.x; i < len; i += blockDim.x) {
    const double v = fabs(double(to_op(x[i])));
    acc = norm_combine(acc, mode == kNormL2 ? v * v : mode == kNormP ? pow(v, p) : v, mode);
  }
  const double total = block_combine(acc, mode);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

__global__ void __launch_bounds__(kThreads)
    norm_finish_kernel(const double* partial, int64_t n, double p, int mode, double* out) {
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc = norm_combine(acc, partial[i], mode);
  const double total = block_combine(acc, mode);
  if (threadIdx.x == 0) *out = mode == kNormInf ? total : pow(total, 1.0 / p);
}

void foreach_norm_kernel(const std::vector<Tensor>& tensors, double p, Tensor& out) {
  TensorDeviceGuard guard(out);
  const cudaStream_t stream = stream_of(out);
  const int mode = std::isinf(p) ? kNormInf : p == 1.0 ? kNormL1 : p == 2.0 ? kNormL2 : kNormP;
  int64_t chunks = 0;
  for (const Tensor& t : tensors) chunks += (t.numel() + kChunk - 1) / kChunk;
  Tensor partial = empty({std::max<int64_t>(chunks, 1)}, kFloat64, out.device());
  double* part = static_cast<double*>(partial.data_ptr());
  int64_t written = 0;
  for_each_dtype_dense(tensors, false, [&](const std::vector<Tensor>& g, DType dt) {
    dispatch_floating(dt, "foreach_norm", [&]<typename T>() {
      multi_tensor_apply<1>({&g}, nullptr, nullptr, [&](const auto& a, int blocks) {
        norm_partial_kernel<T><<<blocks, kThreads, 0, stream>>>(a, p, mode, part + written);
        MINIDL_CUDA_LAUNCH_CHECK();
        written += blocks;
      });
    });
  });
  norm_finish_kernel<<<1, kThreads, 0, stream>>>(part, written, p, mode,
                                                 static_cast<double*>(out.data_ptr()));
  MINIDL_CUDA_LAUNCH_CHECK();
}

template <typename C>
struct ScaleOp {
  C s;
  __device__ void operator()(C (&r)[1][kILP]) const {
#pragma unroll
    for (int k = 0; k < kILP; ++k) r[0][k] = mul_rn(r[0][k], s);
  }
};

template <typename T>
__global__ void __launch_bounds__(kThreads)
    clip_by_norm_kernel(TensorListArgs<1> a, const double* total, double max_norm) {
  const double coef = max_norm / (*total + 1e-6);
  if (coef >= 1) return;  // nothing to clip (a NaN total goes on: the grads become NaN)
  using C = opmath_t<T>;
  chunk_apply<T, 1>(a, ScaleOp<C>{C(coef)});
}

void foreach_clip_by_norm_kernel(const std::vector<Tensor>& tensors, const Tensor& total,
                                 double max_norm) {
  TensorDeviceGuard guard(total);
  const cudaStream_t stream = stream_of(total);
  const double* tot = static_cast<const double*>(total.data_ptr());
  for_each_dtype_dense(tensors, true, [&](const std::vector<Tensor>& g, DType dt) {
    dispatch_floating(dt, "foreach_clip_by_norm", [&]<typename T>() {
      multi_tensor_apply<1>({&g}, nullptr, nullptr, [&](const auto& a, int blocks) {
        clip_by_norm_kernel<T><<<blocks, kThreads, 0, stream>>>(a, tot, max_norm);
        MINIDL_CUDA_LAUNCH_CHECK();
      });
    });
  });
}

// ---- foreach_copy: dst[i] = src[i] converted, the (src, dst) pointer lists packed like the
// optimizer steps' (list 0 the sources, list 1 the destinations), a grid-stride loop per chunk.
template <typename S, typename D>
__global__ void foreach_copy_chunks(mta::TensorListArgs<2> a) {
  const int ti = a.block_tensor[blockIdx.x];
  const int64_t start = int64_t(a.block_chunk[blockIdx.x]) * mta::kChunk;
  const int64_t rest = a.numel[ti] - start;
  const int len = int(rest < mta::kChunk ? rest : mta::kChunk);
  const S* s = static_cast<const S*>(a.ptr[0][ti]) + start;
  D* d = static_cast<D*>(a.ptr[1][ti]) + start;
  for (int i = threadIdx.x; i < len; i += blockDim.x) d[i] = from_op<D>(to_op(s[i]));
}

void foreach_copy_kernel(const std::vector<Tensor>& dst, const std::vector<Tensor>& src) {
  if (dst.empty()) return;
  TensorDeviceGuard guard(dst[0]);
  const cudaStream_t stream = stream_of(dst[0]);
  // one launch sequence per (source dtype, destination dtype) pair
  std::map<std::pair<DType, DType>, std::vector<size_t>> groups;
  for (size_t i = 0; i < dst.size(); ++i) groups[{src[i].dtype(), dst[i].dtype()}].push_back(i);
  for (const auto& [types, idx] : groups) {
    const std::vector<Tensor> s = mta::pick(src, idx), d = mta::pick(dst, idx);
    dispatch_floating(types.first, "foreach_copy", [&]<typename S>() {
      dispatch_floating(types.second, "foreach_copy", [&]<typename D>() {
        mta::multi_tensor_apply<2>(
            {&s, &d}, nullptr, nullptr, [&](const mta::TensorListArgs<2>& a, int blocks) {
              foreach_copy_chunks<S, D><<<blocks, mta::kThreads, 0, stream>>>(a);
              MINIDL_CUDA_LAUNCH_CHECK();
            });
      });
    });
  }
}

}  // namespace

void register_optim_kernels() {
  register_kernel<Op::foreach_copy>(DeviceType::cuda, foreach_copy_kernel);
  register_kernel<Op::fused_sgd>(DeviceType::cuda, fused_sgd_kernel);
  register_kernel<Op::fused_adam>(DeviceType::cuda, fused_adam_kernel);
  register_kernel<Op::foreach_norm>(DeviceType::cuda, foreach_norm_kernel);
  register_kernel<Op::foreach_clip_by_norm>(DeviceType::cuda, foreach_clip_by_norm_kernel);
}

}  // namespace minidl::cuda
