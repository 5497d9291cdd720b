// The kernel table kernel[op][device]: op enum from tensor/op_list.def, typed kernel
// signatures, explicit registration (register_cpu_kernels / register_cuda_kernels).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "tensor/kernel_registration.h"
#include "tensor/op.h"
#include "tensor/profiler.h"
#include "tensor/tensor.h"

namespace minidl {

class Generator;

struct Conv2dParams {
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};
  int64_t dilation[2] = {1, 1};
  int64_t groups = 1;
};
struct Pool2dParams {
  int64_t kernel[2] = {1, 1};
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};
  int64_t dilation[2] = {1, 1};  // max pool only
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg pool only
  int64_t divisor_override = 0;   // avg pool only; 0 = none
};
struct CrossEntropyParams {
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
};

// ---- kernel signatures. Outputs are allocated by the frontend with their final shape and
// dtype; inputs may have any strides (including 0 from broadcasting) unless noted.
using UnaryKernel = void (*)(const Tensor& in, Tensor& out);
using BinaryKernel = void (*)(const Tensor& a, const Tensor& b, Tensor& out);
// out = a + alpha*b for f16/bf16 a, b, out of one shape (any strides), computed in f32 with one
// rounding at the store.
using AddScaledKernel = void (*)(const Tensor& a, const Tensor& b, float alpha, Tensor& out);
// nn.Linear with a bias in one call: x2d:[M,K] w:[N,K] bias:[N] -> out:[M,N] (contiguous,
// preallocated). Returns false when the backend has no fused path for these operands; the
// caller then computes matmul + add itself.
using LinearBiasKernel = bool (*)(const Tensor& x2d, const Tensor& w, const Tensor& bias,
                                  Tensor& out);
// nn.Linear's parameter gradients in one call: g2d:[M,N] x2d:[M,K] (any strides) ->
// grad_w:[N,K] = g2d^T x2d and, when grad_b is defined, grad_b:[N] = the column sums of g2d
// (both contiguous, preallocated, g's dtype; CUDA: the bias gradient from the GEMM's cuBLASLt
// BGRADB epilogue where it has one).
using LinearWeightGradKernel = void (*)(const Tensor& g2d, const Tensor& x2d, Tensor& grad_w,
                                        Tensor& grad_b);
// An MLP's first Linear and its GELU (tanh) in one call: x2d:[M,K] w:[N,K] bias:[N] ->
// pre:[M,N] = x2d w^T + bias, out:[M,N] = gelu_tanh(pre) (both contiguous, preallocated, x's
// dtype; CUDA: one cuBLASLt GEMM writing both where its GELU_AUX_BIAS epilogue applies).
using LinearGeluKernel = void (*)(const Tensor& x2d, const Tensor& w, const Tensor& bias,
                                  Tensor& pre, Tensor& out);
// The gradient of an MLP's hidden pre-activation through c_proj and the tanh GELU:
// g2d:[M,N] w:[N,K] pre2d:[M,K] -> out:[M,K] = gelu_tanh'(pre2d) * (g2d w) (all one dtype; pre2d
// and out contiguous, out preallocated; CUDA: one cuBLASLt GEMM with the DGELU epilogue).
using MatmulGeluBackwardKernel = void (*)(const Tensor& g2d, const Tensor& w, const Tensor& pre2d,
                                          Tensor& out);
using WhereKernel = void (*)(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out);
using ClampKernel = void (*)(const Tensor& in, Tensor& out, double lo, double hi);  // ±inf = none
using FillKernel = void (*)(Tensor& out, Scalar value);
using ArangeKernel = void (*)(Tensor& out, double start, double step);
// dims: normalised, sorted, unique; out has in's rank with size 1 in those dims.
using ReduceKernel = void (*)(const Tensor& in, Tensor& out, const DimList& dims);
using VarKernel = void (*)(const Tensor& in, Tensor& out, const DimList& dims, double correction);
// values/indices have in's shape with size 1 at dim; indices int64.
using ArgReduceKernel = void (*)(const Tensor& in, Tensor& values, Tensor& indices, int64_t dim);
using SoftmaxKernel = void (*)(const Tensor& in, Tensor& out, int64_t dim);
using SoftmaxBackwardKernel = void (*)(const Tensor& grad_out, const Tensor& out, Tensor& grad_in,
                                       int64_t dim);
// conv2d: x:[N,C,H,W] w:[O,C/g,kh,kw] bias:[O] or undefined -> out:[N,O,Ho,Wo]
using Conv2dKernel = void (*)(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
                              const Conv2dParams& p);
// backward_input: (grad_out, w, grad_x); backward_weight: (grad_out, x, grad_w). Outputs are
// overwritten (not accumulated).
using Conv2dBackwardKernel = void (*)(const Tensor& grad_out, const Tensor& other, Tensor& grad,
                                      const Conv2dParams& p);
// max_pool2d: x:[N,C,H,W] -> out, indices (int64, flat index into H*W of each plane)
using MaxPool2dKernel = void (*)(const Tensor& x, Tensor& out, Tensor& indices,
                                 const Pool2dParams& p);
using MaxPool2dBackwardKernel = void (*)(const Tensor& grad_out, const Tensor& indices,
                                         Tensor& grad_in, const Pool2dParams& p);
// avg_pool2d: (x, out); backward: (grad_out, grad_in)
using AvgPool2dKernel = void (*)(const Tensor& in, Tensor& out, const Pool2dParams& p);
// layer_norm over the trailing dims of size normalized_numel. x:[R, D] viewed; mean,rstd:[R] f32
// (f64 for f64 x). w,b:[D] or undefined.
using LayerNormKernel = void (*)(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& out,
                                 Tensor& mean, Tensor& rstd, int64_t normalized_numel, double eps);
using LayerNormBackwardKernel = void (*)(const Tensor& grad_out, const Tensor& x,
                                         const Tensor& mean, const Tensor& rstd, const Tensor& w,
                                         Tensor& grad_x, Tensor& grad_w, Tensor& grad_b,
                                         int64_t normalized_numel);
// add_layer_norm (a transformer's residual add and the next pre-norm in one pass): sum = x + y
// in x's dtype (y undefined: no sum, the rows of x), out = layer_norm(sum) in out's dtype.
// x, y, sum, out:[R, D] contiguous; y and out may be f16/bf16 where x is f32; mean,rstd:[R].
using AddLayerNormKernel = void (*)(const Tensor& x, const Tensor& y, const Tensor& w,
                                    const Tensor& b, Tensor& sum, Tensor& out, Tensor& mean,
                                    Tensor& rstd, int64_t normalized_numel, double eps);
// Its backward: g = grad_sum + layer_norm_backward(grad_out) (grad_sum, s's dtype, may be
// undefined; grad_out in out's dtype); grad_x = g in s's dtype, grad_y = g in its own dtype
// (undefined: not wanted). s is the saved sum (or x). grad_w, grad_b:[D] or undefined.
using AddLayerNormBackwardKernel = void (*)(const Tensor& grad_out, const Tensor& grad_sum,
                                            const Tensor& s, const Tensor& mean, const Tensor& rstd,
                                            const Tensor& w, Tensor& grad_x, Tensor& grad_y,
                                            Tensor& grad_w, Tensor& grad_b,
                                            int64_t normalized_numel);
// batch_norm: x:[N,C,*]; w,b,running_*:[C] or undefined; save_mean/save_invstd:[C] (train mode
// batch statistics, eval mode left empty). Running stats updated in train mode with momentum,
// unbiased variance, as PyTorch.
using BatchNormKernel = void (*)(const Tensor& x, const Tensor& w, const Tensor& b,
                                 Tensor& running_mean, Tensor& running_var, Tensor& out,
                                 Tensor& save_mean, Tensor& save_invstd, bool training,
                                 double momentum, double eps);
using BatchNormBackwardKernel = void (*)(const Tensor& grad_out, const Tensor& x, const Tensor& w,
                                         const Tensor& running_mean, const Tensor& running_var,
                                         const Tensor& save_mean, const Tensor& save_invstd,
                                         Tensor& grad_x, Tensor& grad_w, Tensor& grad_b,
                                         bool training, double eps);
// cross_entropy: logits:[N,C] target:[N] int64 -> loss:[N] per sample (0 where ignored),
// lse:[N] (logsumexp of each row, saved for backward)
using CrossEntropyKernel = void (*)(const Tensor& logits, const Tensor& target, Tensor& loss,
                                    Tensor& lse, const CrossEntropyParams& p);
// grad_loss:[N] per-sample upstream gradient -> grad_logits:[N,C]
using CrossEntropyBackwardKernel = void (*)(const Tensor& grad_loss, const Tensor& logits,
                                            const Tensor& target, const Tensor& lse,
                                            Tensor& grad_logits, const CrossEntropyParams& p);
// fused_cross_entropy (llm.c's fused classifier): logits:[N,Vp] contiguous, target:[N] int64
// contiguous -> loss: 0-d (f32; f64 for f64 logits) = mean over the rows whose target is not
// ignore_index of logsumexp(row[:V]) - row[target] (NaN when none is). With write_grad the
// logits are overwritten with (softmax(row[:V]) - onehot(target)) / n_valid, 0 in the padded
// columns V..Vp and in ignored rows; n_valid is counted on the device.
struct FusedCrossEntropyParams {
  int64_t num_classes = 0;  // V <= Vp
  int64_t ignore_index = -100;
  bool write_grad = true;
};
using FusedCrossEntropyKernel = void (*)(Tensor& logits, const Tensor& target, Tensor& loss,
                                         const FusedCrossEntropyParams& p);
// grad:[N,Vp] contiguous *= grad_loss (0-d, f32; f64 for f64 grad; read on the device), in place
using FusedCrossEntropyBackwardKernel = void (*)(Tensor& grad, const Tensor& grad_loss);
// (in, dim, index int64, out)
using IndexKernel = void (*)(const Tensor& in, int64_t dim, const Tensor& index, Tensor& out);
// grad_out:[..., D], indices int64 [...] -> grad_weight:[num_weights, D] (overwritten; with
// accumulate, each indexed row r other than padding_idx becomes grad_weight[r] + its sum rounded
// to the dtype, the rest untouched)
using EmbeddingBackwardKernel = void (*)(const Tensor& grad_out, const Tensor& indices,
                                         Tensor& grad_weight, int64_t padding_idx, bool accumulate);
// out[index[i][j]][j] += src[i][j] (dim 0 example); out is updated in place
using ScatterKernel = void (*)(Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);
using TopkKernel = void (*)(const Tensor& in, int64_t k, int64_t dim, bool largest, bool sorted,
                            Tensor& values, Tensor& indices);
// Fills a contiguous `out` from the generator's Philox stream (see tensor/random.h).
using RandomKernel = void (*)(Tensor& out, double a, double b, Generator& gen);
// ---- masking, scans, rounding division, multinomial (tensor/ops/mask.cpp, scan.cpp,
// binary.cpp, random.cpp).
// tril/triu: in any strides, out contiguous of in's shape and dtype (rank >= 2).
using TriKernel = void (*)(const Tensor& in, Tensor& out, int64_t diagonal);
// cumsum along dim: in any strides, out contiguous, one dtype (f16/bf16 accumulate in float,
// integers in int64 wrapping). reverse: out[i] = sum over j >= i (the backward).
using CumsumKernel = void (*)(const Tensor& in, Tensor& out, int64_t dim, bool reverse);
// multinomial: w:[B,C] f64 contiguous scratch copy of the weights (validated by the frontend;
// the kernel overwrites it) -> out:[B,S] int64 contiguous. Mapping in tensor/random.h.
using MultinomialKernel = void (*)(Tensor& w, Tensor& out, bool replacement, Generator& gen);

// ---- scaled_dot_product_attention (tensor/ops/attention.cpp). q:[BH,L,E] k:[BH,S,E]
// v:[BH,S,Ev] contiguous, one floating dtype; out:[BH,L,Ev] (q's dtype), lse:[BH,L] (f32; f64
// for f64) = log-sum-exp of each row's scaled, masked scores (+inf for a fully masked row,
// whose output and gradients are 0). Backward: grad_out:[BH,L,Ev] contiguous in q's dtype;
// grad_q/k/v are overwritten.
struct SdpaParams {
  double scale = 1.0;
  bool is_causal = false;  // key j takes part for query i only when j <= i (top-left aligned)
  double dropout_p = 0.0;  // > 0: probabilities times Bernoulli(1-p)/(1-p) regenerated from
  uint64_t seed = 0, offset = 0;  // Philox (seed, offset): element bh*L*S + i*S + j of a
                                  // 32-bit draw, the stream of dropout_mask({BH,L,S}, p)
  // Optional mask: bool (true = takes part) or floating (added to the scores; f32, f64 for
  // f64), element (bh, i, j) at mask.data_ptr() + mask_offsets[bh] + i*stride_l + j*stride_s
  // (mask_offsets: int64 [BH] on the inputs' device).
  Tensor mask, mask_offsets;
  int64_t mask_stride_l = 0, mask_stride_s = 0;
};
using SdpaKernel = void (*)(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                            Tensor& lse, const SdpaParams& p);
using SdpaBackwardKernel = void (*)(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& out, const Tensor& lse,
                                    Tensor& grad_q, Tensor& grad_k, Tensor& grad_v,
                                    const SdpaParams& p);

// ---- AMP and fused optimizer steps (frontends with validation: optim/fused.h).
// grads (any floating dtypes, one device, updated in place): g *= inv_scale (skipped when
// inv_scale == 1), and found_inf (0-d f32) is set to 1 when any element was inf/NaN before the
// multiplication (never reset here). PyTorch's _amp_foreach_non_finite_check_and_unscale_.
using NonFiniteCheckUnscaleKernel = void (*)(const std::vector<Tensor>& grads, Tensor& found_inf,
                                             const Tensor& inv_scale);
// PyTorch's _amp_update_scale_: scale (0-d f32), growth_tracker (0-d int32), found_inf (0-d
// f32). found_inf: scale *= backoff, tracker = 0; else tracker += 1 and at growth_interval
// scale *= growth (kept when the result would be inf), tracker = 0.
using AmpUpdateScaleKernel = void (*)(Tensor& scale, Tensor& growth_tracker,
                                      const Tensor& found_inf, double growth_factor,
                                      double backoff_factor, int64_t growth_interval);
// A group's hyper-parameters for the fused steps: read() returns the current host values
// (SGD: {lr, momentum, dampening, weight_decay}; Adam: {lr, beta1, beta2, eps, weight_decay}).
// CUDA kernels keep a device copy in `dev`, uploaded before every eager step and, for a step
// captured in a CUDA graph, before every replay (so LR schedulers work with captured steps).
struct FusedHyper {
  std::function<std::array<double, 8>()> read;
  Tensor dev;
};
// Optional AMP inputs of both fused steps (0-d f32 on the parameters' device, or undefined):
// grads are divided by grad_scale inside the step, and when found_inf != 0 the whole update,
// step counts included, is skipped on the device.
struct FusedAmpArgs {
  Tensor grad_scale, found_inf;
};
// SGD over params[i] / grads[i] with momentum buffers bufs[i] (empty without momentum);
// first[i] != 0: bufs[i] is set to the (weight-decayed) gradient. Math of optim/sgd.cpp.
struct FusedSgdArgs {
  std::shared_ptr<FusedHyper> hyper;
  bool nesterov = false;
  std::vector<Tensor> params, grads, bufs;
  std::vector<uint8_t> first;
  FusedAmpArgs amp;
};
// Adam(W) with exp_avg, exp_avg_sq, max_exp_avg_sq (amsgrad; empty otherwise) and step counts
// (0-d f64, incremented before the update). Math of optim/adam.cpp. param_copies: empty, or one
// per parameter, undefined or a contiguous tensor of its numel: after the op it holds the
// parameter converted to its dtype (also when found_inf skipped the step); autocast's 16-bit
// weight copies, written in the update's pass on the CPU.
struct FusedAdamArgs {
  std::shared_ptr<FusedHyper> hyper;
  bool decoupled = false;  // AdamW
  std::vector<Tensor> params, grads, exp_avg, exp_avg_sq, max_exp_avg_sq, steps, param_copies;
  FusedAmpArgs amp;
};
using FusedSgdKernel = void (*)(const FusedSgdArgs& args);
using FusedAdamKernel = void (*)(const FusedAdamArgs& args);
// Gradient clipping by total norm (torch.nn.utils.clip_grad_norm_'s _foreach_norm and
// _foreach_mul_), over floating tensors on one device, any dtypes. foreach_norm: out (0-d f64)
// = (sum over every element of |x|^p)^(1/p), or max |x| for p = inf; |x| and the sums in f64,
// summed per chunk of 64Ki elements and the chunks in order, so the result does not depend on
// the thread count. foreach_clip_by_norm: every tensor *= max_norm / (total + 1e-6) (in
// opmath) where that factor is below 1 or NaN, reading total (0-d f64) on the device.
using ForeachNormKernel = void (*)(const std::vector<Tensor>& tensors, double norm_type,
                                   Tensor& out);
using ForeachClipByNormKernel = void (*)(const std::vector<Tensor>& tensors, const Tensor& total,
                                         double max_norm);
// torch._foreach_copy_: dst[i] = src[i] converted to dst[i]'s dtype, for contiguous floating
// tensors on one device with matching numel (autocast's 16-bit copies of a step's weights).
using ForeachCopyKernel = void (*)(const std::vector<Tensor>& dst, const std::vector<Tensor>& src);

template <Op op>
struct OpSignature;
#define MINIDL_OP(name, sig)     \
  template <>                    \
  struct OpSignature<Op::name> { \
    using type = sig;            \
  };
#include "tensor/op_list.def"
#undef MINIDL_OP

namespace detail {
void* kernel_slot(Op op, DeviceType device);  // nullptr when missing
void set_kernel_slot(Op op, DeviceType device, void* fn);
[[noreturn]] void missing_kernel(Op op, DeviceType device);
}  // namespace detail

template <Op op>
void register_kernel(DeviceType device, typename OpSignature<op>::type fn) {
  detail::set_kernel_slot(op, device, reinterpret_cast<void*>(fn));
}

bool has_kernel(Op op, DeviceType device);

namespace detail {
// The kernel of `op` on `dev`, called inside a profiler scope (tensor/profiler.h).
template <Op op, DeviceType dev, typename Fn>
struct Profiled;
template <Op op, DeviceType dev, typename R, typename... Args>
struct Profiled<op, dev, R (*)(Args...)> {
  static R call(Args... args) {
    profiler::detail::Scope scope(op, dev);
    return reinterpret_cast<R (*)(Args...)>(kernel_slot(op, dev))(std::forward<Args>(args)...);
  }
};
}  // namespace detail

// The kernel for `op` on `device`; throws "op `gelu` has no CUDA kernel" when missing. While
// the profiler is on, a wrapper that times the call.
template <Op op>
typename OpSignature<op>::type kernel(Device device) {
  using Fn = typename OpSignature<op>::type;
  void* fn = detail::kernel_slot(op, device.type);
  if (!fn) detail::missing_kernel(op, device.type);
  if (profiler::enabled()) [[unlikely]]
    return device.type == DeviceType::cuda ? &detail::Profiled<op, DeviceType::cuda, Fn>::call
                                           : &detail::Profiled<op, DeviceType::cpu, Fn>::call;
  return reinterpret_cast<Fn>(fn);
}

// Copy between devices (installed by the CUDA backend): src and dst have the same shape and
// dtype, dst is contiguous, src is contiguous.
using CrossDeviceCopyFn = void (*)(const Tensor& src, Tensor& dst);
void set_cross_device_copy(CrossDeviceCopyFn fn);
CrossDeviceCopyFn cross_device_copy();  // nullptr without a CUDA backend

// The kernel families of each device, in tensor/kernel_families.def's order (CUDA: empty in a
// CPU-only build), and the ops one family's registration function fills for `device` (it is
// run again: registration is idempotent). For tests that check both devices mirror the list.
struct KernelFamily {
  std::string_view name;
  void (*register_kernels)();
};
const std::vector<KernelFamily>& cpu_kernel_families();
const std::vector<KernelFamily>& cuda_kernel_families();
std::vector<Op> ops_registered_by(const KernelFamily& family, DeviceType device);

}  // namespace minidl
