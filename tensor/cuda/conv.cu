// CUDA kernels: conv2d forward and both backward passes through cuDNN's legacy convolution API
// (NCHW, groups, stride, padding, dilation), mirroring tensor/cpu/conv.cpp. The algorithm comes
// once per shape from cuDNN's heuristics (or, with cudnn_benchmark(), from timing them) and is
// cached; the bias is added by a small kernel.
// Without cuDNN (MINIDL_WITH_CUDNN unset) no conv kernels are registered.
#include "tensor/cuda/kernels.h"

#ifdef MINIDL_WITH_CUDNN
#include <algorithm>
#include <array>
#include <climits>
#include <map>
#include <mutex>
#include <vector>

#include "tensor/cuda_api.h"
#include "tensor/cuda/runtime/handles.cuh"
#include "tensor/dispatch.h"

namespace minidl::cuda {
namespace {

enum class Pass { fwd, bwd_data, bwd_filter };
constexpr const char* kOpNames[] = {"conv2d", "conv2d_backward_input", "conv2d_backward_weight"};

// x:[N,C,H,W] w:[O,C/groups,kh,kw] y:[N,O,Ho,Wo]
struct Geom {
  int64_t N, C, H, W, O, Cg, kh, kw, Ho, Wo;
};
Geom make_geom(const Shape& x, const Shape& w, const Shape& y) {
  return {x[0], x[1], x[2], x[3], w[0], w[1], w[2], w[3], y[2], y[3]};
}

// Device buffers of one call; the pass writes y (fwd), x (bwd_data) or w (bwd_filter).
struct Bufs {
  void *x, *w, *y;
};

// Descriptors for one (pass, shape, dtype, params) and the chosen algorithm.
struct Plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  int algo = 0;
  size_t ws = 0;
};

// One candidate algorithm, whichever pass it came from.
struct Choice {
  int algo;
  cudnnStatus_t status;
  size_t memory;
  cudnnMathType_t math;
  bool deterministic;
};

cudnnDataType_t dnn_type(DType t) {
  switch (t) {
    case DType::f32:
      return CUDNN_DATA_FLOAT;
    case DType::f64:
      return CUDNN_DATA_DOUBLE;
    case DType::f16:
      return CUDNN_DATA_HALF;
    default:
      return CUDNN_DATA_BFLOAT16;
  }
}

// f16/bf16: tensor cores; f32: TF32 tensor cores only when allow_tf32(), else FMA kernels.
cudnnMathType_t math_type(DType t) {
  if (t == DType::f16 || t == DType::bf16) return CUDNN_TENSOR_OP_MATH;
  if (t == DType::f32) return allow_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  return CUDNN_DEFAULT_MATH;
}

int to_int(int64_t v, Pass pass, const char* what) {
  MINIDL_CHECK(v <= INT_MAX, "op `", kOpNames[int(pass)], "`: ", what, " ", v,
               " exceeds cuDNN's 32-bit limit");
  return int(v);
}

uint32_t align16(const void* p) {
  uint32_t a = 16;
  while (a > 1 && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
  return a;
}

void make_descs(Plan& pl, Pass pass, DType dt, const Geom& g, int64_t n, const Conv2dParams& p) {
  const cudnnDataType_t ty = dnn_type(dt);
  MINIDL_CUDNN_CHECK(cudnn_api().cudnnCreateTensorDescriptor(&pl.x));
  MINIDL_CUDNN_CHECK(cudnn_api().cudnnCreateTensorDescriptor(&pl.y));
  MINIDL_CUDNN_CHECK(cudnn_api().cudnnCreateFilterDescriptor(&pl.w));
  MINIDL_CUDNN_CHECK(cudnn_api().cudnnCreateConvolutionDescriptor(&pl.conv));
  const int ni = to_int(n, pass, "batch");
  MINIDL_CUDNN_CHECK(cudnn_api().cudnnSetTensor4dDescriptor(pl.x, CUDNN_TENSOR_NCHW, ty, ni,
                                                            int(g.C), int(g.H), int(g.W)));
  MINIDL_CUDNN_CHECK(cudnn_api().cudnnSetTensor4dDescriptor(pl.y, CUDNN_TENSOR_NCHW, ty, ni,
                                                            int(g.O), int(g.Ho), int(g.Wo)));
  MINIDL_CUDNN_CHECK(cudnn_api().cudnnSetFilter4dDescriptor(pl.w, ty, CUDNN_TENSOR_NCHW, int(g.O),
                                                            int(g.Cg), int(g.kh), int(g.kw)));
  MINIDL_CUDNN_CHECK(cudnn_api().cudnnSetConvolution2dDescriptor(
      pl.conv, to_int(p.padding[0], pass, "padding"), to_int(p.padding[1], pass, "padding"),
      to_int(p.stride[0], pass, "stride"), to_int(p.stride[1], pass, "stride"),
      to_int(p.dilation[0], pass, "dilation"), to_int(p.dilation[1], pass, "dilation"),
      CUDNN_CROSS_CORRELATION, dt == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT));
  MINIDL_CUDNN_CHECK(cudnn_api().cudnnSetConvolutionGroupCount(pl.conv, int(p.groups)));
  MINIDL_CUDNN_CHECK(cudnn_api().cudnnSetConvolutionMathType(pl.conv, math_type(dt)));
}

// Workspace bytes of one algorithm (0 when it does not apply to the problem).
size_t ws_size(cudnnHandle_t h, Pass pass, const Plan& pl, int algo) {
  size_t s = 0;
  cudnnStatus_t st;
  if (pass == Pass::fwd)
    st = cudnn_api().cudnnGetConvolutionForwardWorkspaceSize(h, pl.x, pl.w, pl.conv, pl.y,
                                                             cudnnConvolutionFwdAlgo_t(algo), &s);
  else if (pass == Pass::bwd_data)
    st = cudnn_api().cudnnGetConvolutionBackwardDataWorkspaceSize(
        h, pl.w, pl.y, pl.conv, pl.x, cudnnConvolutionBwdDataAlgo_t(algo), &s);
  else
    st = cudnn_api().cudnnGetConvolutionBackwardFilterWorkspaceSize(
        h, pl.x, pl.y, pl.conv, pl.w, cudnnConvolutionBwdFilterAlgo_t(algo), &s);
  return st == CUDNN_STATUS_SUCCESS ? s : 0;
}

template <typename Perf>
std::vector<Choice> to_choices(const Perf* r, int n) {
  std::vector<Choice> c;
  for (int i = 0; i < n; ++i)
    c.push_back({int(r[i].algo), r[i].status, r[i].memory, r[i].mathType,
                 r[i].determinism == CUDNN_DETERMINISTIC});
  return c;
}

constexpr int kAlgoCount[] = {CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                              CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT};
constexpr int kMaxAlgos = 16;
static_assert(CUDNN_CONVOLUTION_FWD_ALGO_COUNT <= kMaxAlgos &&
              CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT <= kMaxAlgos &&
              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT <= kMaxAlgos);

// Candidates, best first: benchmarked on real buffers (find), or the heuristics' ranking while
// a CUDA graph is being captured (benchmarking synchronises, which capture forbids).
std::vector<Choice> candidates(cudnnHandle_t h, Pass pass, const Plan& pl, Bufs b, void* ws,
                               size_t wsb, bool find) {
  const int req = kAlgoCount[int(pass)];
  int got = 0;
  if (pass == Pass::fwd) {
    cudnnConvolutionFwdAlgoPerf_t r[kMaxAlgos];
    MINIDL_CUDNN_CHECK(find
                           ? cudnn_api().cudnnFindConvolutionForwardAlgorithmEx(
                                 h, pl.x, b.x, pl.w, b.w, pl.conv, pl.y, b.y, req, &got, r, ws, wsb)
                           : cudnn_api().cudnnGetConvolutionForwardAlgorithm_v7(
                                 h, pl.x, pl.w, pl.conv, pl.y, req, &got, r));
    return to_choices(r, got);
  }
  if (pass == Pass::bwd_data) {
    cudnnConvolutionBwdDataAlgoPerf_t r[kMaxAlgos];
    MINIDL_CUDNN_CHECK(find
                           ? cudnn_api().cudnnFindConvolutionBackwardDataAlgorithmEx(
                                 h, pl.w, b.w, pl.y, b.y, pl.conv, pl.x, b.x, req, &got, r, ws, wsb)
                           : cudnn_api().cudnnGetConvolutionBackwardDataAlgorithm_v7(
                                 h, pl.w, pl.y, pl.conv, pl.x, req, &got, r));
    return to_choices(r, got);
  }
  cudnnConvolutionBwdFilterAlgoPerf_t r[kMaxAlgos];
  MINIDL_CUDNN_CHECK(find ? cudnn_api().cudnnFindConvolutionBackwardFilterAlgorithmEx(
                                h, pl.x, b.x, pl.y, b.y, pl.conv, pl.w, b.w, req, &got, r, ws, wsb)
                          : cudnn_api().cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                                h, pl.x, pl.y, pl.conv, pl.w, req, &got, r));
  return to_choices(r, got);
}

constexpr size_t kMaxWorkspace = size_t(1) << 30;  // per-algorithm cap (1 GiB)

// Builds a plan: descriptors, then the first algorithm that fits the workspace cap (and, for
// f32 without TF32, runs on FMA units only), in cuDNN's heuristic order or, in benchmark mode,
// timed (Find). Find overwrites its output, so it writes into a temporary of the output's size;
// the workspace for it comes from the caching allocator. No timing while a graph is captured.
void choose_algo(Plan& pl, Pass pass, DType dt, const Geom& g, int64_t n, Bufs b, Device dev) {
  cudnnHandle_t h = cudnn_handle(dev.index);
  const bool find = cudnn_benchmark() && !is_capturing(dev.index);
  Tensor out_tmp, ws;
  size_t wsb = 0;
  if (find) {
    const int64_t out_numel = pass == Pass::fwd        ? n * g.O * g.Ho * g.Wo
                              : pass == Pass::bwd_data ? n * g.C * g.H * g.W
                                                       : g.O * g.Cg * g.kh * g.kw;
    out_tmp = empty({out_numel}, dt, dev);
    (pass == Pass::fwd ? b.y : pass == Pass::bwd_data ? b.x : b.w) = out_tmp.data_ptr();
    for (int a = 0; a < kAlgoCount[int(pass)]; ++a)
      wsb = std::max(wsb, std::min(ws_size(h, pass, pl, a), kMaxWorkspace));
    while (wsb > 0) {  // less workspace (fewer algorithms) when memory is short
      try {
        ws = empty({int64_t(wsb)}, DType::u8, dev);
        break;
      } catch (const Error&) {
        wsb = wsb > (size_t(1) << 20) ? wsb / 4 : 0;
      }
    }
  }
  const std::vector<Choice> cands =
      candidates(h, pass, pl, b, wsb ? ws.data_ptr() : nullptr, wsb, find);
  const cudnnMathType_t want = math_type(dt);
  const size_t cap = find ? wsb : kMaxWorkspace;
  const bool need_deterministic = cudnn_deterministic();
  for (const Choice& c : cands) {
    if (c.status != CUDNN_STATUS_SUCCESS || c.memory > cap) continue;
    if (need_deterministic && !c.deterministic) continue;
    // f32 without TF32 stays on FMA whatever math type the result reports (as PyTorch)
    const cudnnMathType_t math = want == CUDNN_FMA_MATH ? want : c.math;
    MINIDL_CUDNN_CHECK(cudnn_api().cudnnSetConvolutionMathType(pl.conv, math));
    pl.algo = c.algo;
    pl.ws = std::max(c.memory, ws_size(h, pass, pl, c.algo));
    return;
  }
  MINIDL_FAIL("op `", kOpNames[int(pass)], "`: cuDNN has no algorithm for input [", n, ", ", g.C,
              ", ", g.H, ", ", g.W, "], weight [", g.O, ", ", g.Cg, ", ", g.kh, ", ", g.kw,
              "], dtype ", dt, " (", cands.size(), " candidates",
              need_deterministic ? ", deterministic ones only" : "", ")");
}

using PlanKey = std::array<int64_t, 24>;

Plan& get_plan(Pass pass, DType dt, const Geom& g, int64_t n, const Conv2dParams& p, Bufs b,
               Device dev) {
  // clang-format off
  const PlanKey key{int64_t(pass), dev.index, int64_t(dt), math_type(dt), n,
                    g.C, g.H, g.W, g.O, g.Cg, g.kh, g.kw,
                    p.stride[0], p.stride[1], p.padding[0], p.padding[1], p.dilation[0],
                    p.dilation[1], p.groups, align16(b.x), align16(b.w), align16(b.y),
                    cudnn_deterministic(), cudnn_benchmark()};
  // clang-format on
  static std::mutex mu;
  static std::map<PlanKey, Plan> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  Plan pl;
  make_descs(pl, pass, dt, g, n, p);
  choose_algo(pl, pass, dt, g, n, b, dev);
  return cache.emplace(key, pl).first->second;
}

// Runs one pass over the batch, in chunks of images small enough for cuDNN's 32-bit sizes
// (the weight gradient accumulates over chunks with beta = 1).
void run(Pass pass, const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p) {
  const Geom g = make_geom(x.shape(), w.shape(), y.shape());
  const DType dt = x.dtype();
  const Device dev = x.device();
  TensorDeviceGuard guard(dev.index);
  cudaStream_t s = stream_of(x);
  if (g.N == 0) {  // no images: only the weight gradient (zeros) has elements
    if (pass == Pass::bwd_filter)
      MINIDL_CUDA_CHECK(cudaMemsetAsync(w.data_ptr(), 0, w.nbytes(), s));
    return;
  }
  to_int(w.numel(), pass, "weight size");
  const int64_t per_image = std::max(g.C * g.H * g.W, g.O * g.Ho * g.Wo);
  const int64_t chunk = std::min<int64_t>(g.N, INT_MAX / per_image);
  MINIDL_CHECK(chunk > 0, "op `", kOpNames[int(pass)], "`: one image of ", per_image,
               " elements exceeds cuDNN's 32-bit limit");
  const size_t es = x.element_size();
  char* xp = static_cast<char*>(x.data_ptr());
  char* yp = static_cast<char*>(y.data_ptr());
  const float f1 = 1.f, f0 = 0.f;
  const double d1 = 1.0, d0 = 0.0;
  const bool dbl = dt == DType::f64;
  cudnnHandle_t h = cudnn_handle(dev.index);
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t n = std::min(chunk, g.N - n0);
    const Bufs b{xp + size_t(n0 * g.C * g.H * g.W) * es, w.data_ptr(),
                 yp + size_t(n0 * g.O * g.Ho * g.Wo) * es};
    const Plan& pl = get_plan(pass, dt, g, n, p, b, dev);
    Tensor ws = pl.ws ? empty({int64_t(pl.ws)}, DType::u8, dev) : Tensor();
    void* wsp = pl.ws ? ws.data_ptr() : nullptr;
    const void* alpha = dbl ? static_cast<const void*>(&d1) : &f1;
    const bool acc = pass == Pass::bwd_filter && n0 > 0;
    const void* beta = dbl ? static_cast<const void*>(acc ? &d1 : &d0) : (acc ? &f1 : &f0);
    if (pass == Pass::fwd)
      MINIDL_CUDNN_CHECK(cudnn_api().cudnnConvolutionForward(
          h, alpha, pl.x, b.x, pl.w, b.w, pl.conv, cudnnConvolutionFwdAlgo_t(pl.algo), wsp, pl.ws,
          beta, pl.y, b.y));
    else if (pass == Pass::bwd_data)
      MINIDL_CUDNN_CHECK(cudnn_api().cudnnConvolutionBackwardData(
          h, alpha, pl.w, b.w, pl.y, b.y, pl.conv, cudnnConvolutionBwdDataAlgo_t(pl.algo), wsp,
          pl.ws, beta, pl.x, b.x));
    else
      MINIDL_CUDNN_CHECK(cudnn_api().cudnnConvolutionBackwardFilter(
          h, alpha, pl.x, b.x, pl.y, b.y, pl.conv, cudnnConvolutionBwdFilterAlgo_t(pl.algo), wsp,
          pl.ws, beta, pl.w, b.w));
  }
}

// y:[N,O,L] += bias[o], in opmath.
template <typename T>
__global__ void add_bias_kernel(T* __restrict__ y, const T* __restrict__ bias, int64_t L, int64_t O,
                                int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = from_op<T>(to_op(y[i]) + to_op(bias[(i / L) % O]));
}

void conv2d_kernel(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
                   const Conv2dParams& p) {
  dispatch_floating(x.dtype(), "conv2d", [&]<typename T>() {
    run(Pass::fwd, x, w, out, p);
    const int64_t n = out.numel();
    if (!bias.defined() || n == 0) return;
    add_bias_kernel<T><<<grid_for(n), kBlock, 0, stream_of(out)>>>(
        ptr<T>(out), ptr<T>(bias), out.size(2) * out.size(3), out.size(1), n);
    MINIDL_CUDA_LAUNCH_CHECK();
  });
}

void conv2d_backward_input_kernel(const Tensor& grad_out, const Tensor& w, Tensor& grad_x,
                                  const Conv2dParams& p) {
  dispatch_floating(grad_out.dtype(), "conv2d_backward_input",
                    [&]<typename>() { run(Pass::bwd_data, grad_x, w, grad_out, p); });
}

void conv2d_backward_weight_kernel(const Tensor& grad_out, const Tensor& x, Tensor& grad_w,
                                   const Conv2dParams& p) {
  dispatch_floating(grad_out.dtype(), "conv2d_backward_weight",
                    [&]<typename>() { run(Pass::bwd_filter, x, grad_w, grad_out, p); });
}

}  // namespace

void register_conv_kernels() {
  register_kernel<Op::conv2d>(DeviceType::cuda, conv2d_kernel);
  register_kernel<Op::conv2d_backward_input>(DeviceType::cuda, conv2d_backward_input_kernel);
  register_kernel<Op::conv2d_backward_weight>(DeviceType::cuda, conv2d_backward_weight_kernel);
}

}  // namespace minidl::cuda

#else  // no cuDNN: conv2d on CUDA throws "op `conv2d` has no CUDA kernel"

namespace minidl::cuda {
void register_conv_kernels() {}
}  // namespace minidl::cuda

#endif
