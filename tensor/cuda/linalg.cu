// CUDA kernels: linalg family. bmm a:[B,M,K] x b:[B,K,N] -> out:[B,M,N] (any strides) as one
// strided-batched cuBLASLt GEMM (tensor/cuda/gemm.cu); nn::Linear's fused kernels: linear_bias,
// linear_gelu (GELU_AUX_BIAS epilogue), matmul_gelu_backward (DGELU) and linear_weight_grad (dW
// with db from the BGRADB epilogue).
#include <cstdint>

#include "tensor/cuda_api.h"
#include "tensor/cuda/gemm.h"
#include "tensor/cuda/kernels.h"
#include "tensor/cuda/runtime/common.cuh"
#include "tensor/dispatch.h"
#include "tensor/ops.h"

namespace minidl::cuda {
namespace {

// out:[B,M,N] = a:[B,M,K] b:[B,K,N]; shapes checked by the frontend.
void bmm_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  if (out.numel() == 0) return;
  check_gemm_dtype(out.dtype(), "bmm");  // dtype check before any allocation
  TensorDeviceGuard guard(out);
  Tensor res = out.is_contiguous() ? out : empty(out.shape(), out.dtype(), out.device());
  if (a.size(2) == 0) {  // empty contraction: zeros, a and b are not read
    MINIDL_CUDA_CHECK(cudaMemsetAsync(res.data_ptr(), 0, res.nbytes(), stream_of(res)));
  } else {
    lt_matmul(a, b, res, nullptr, Epilogue::none, "bmm");
  }
  if (!res.is_same(out)) native::copy_(out, res);
}

// nn.Linear with GELU after it: one cuBLASLt GEMM writing both where its GELU_AUX_BIAS epilogue
// applies; otherwise the bias GEMM, then the gelu_tanh kernel (within this one dispatch).
void linear_gelu_kernel(const Tensor& x2d, const Tensor& w, const Tensor& bias, Tensor& pre,
                        Tensor& out) {
  if (out.numel() == 0) return;
  if (gemm_bias_gelu_aux(x2d, w, bias, pre, out)) return;
  gemm_bias_act(x2d, w, bias, pre, Epilogue::none);
  kernel<Op::gelu_tanh>(DeviceType::cuda)(pre, out);
}

// The GELU's input gradient from c_proj's input-gradient GEMM: out = gelu_tanh'(pre2d) * (g2d w)
// as one cuBLASLt GEMM with the DGELU epilogue (pre2d its auxiliary input) where it applies
// (f32/f16/bf16, K % 8 == 0, pre2d 16-byte aligned); otherwise the GEMM, then the
// gelu_tanh_backward kernel.
void matmul_gelu_backward_kernel(const Tensor& g2d, const Tensor& w, const Tensor& pre2d,
                                 Tensor& out) {
  constexpr const char* op = "matmul_gelu_backward";
  if (out.numel() == 0) return;
  TensorDeviceGuard guard(out);
  const DType dt = out.dtype();
  const Tensor a = native::unsqueeze(g2d, 0), b = native::unsqueeze(w, 0);  // [1,M,N] [1,N,K]
  Tensor out3 = native::unsqueeze(out, 0);
  if ((dt == kFloat32 || dt == kFloat16 || dt == kBFloat16) && out.size(1) % 8 == 0 &&
      g2d.size(1) > 0 && g2d.dtype() == dt && w.dtype() == dt && pre2d.dtype() == dt &&
      pre2d.is_contiguous() && out.is_contiguous() &&
      reinterpret_cast<uintptr_t>(pre2d.data_ptr()) % 16 == 0 &&
      lt_matmul(a, b, out3, nullptr, Epilogue::dgelu, op, const_cast<void*>(pre2d.data_ptr())))
    return;
  Tensor gx = empty(out.shape(), g2d.dtype(), out.device());
  Tensor gx3 = native::unsqueeze(gx, 0);
  bmm_kernel(a, b, gx3);
  kernel<Op::gelu_tanh_backward>(DeviceType::cuda)(gx, pre2d, out);
}

// nn.Linear's bias as the GEMM's cuBLASLt epilogue (as PyTorch's addmm); always applies.
bool linear_bias_kernel(const Tensor& x2d, const Tensor& w, const Tensor& bias, Tensor& out) {
  gemm_bias_act(x2d, w, bias, out, Epilogue::none);
  return true;
}

// nn.Linear's parameter gradients: grad_w:[N,K] = g2d^T x2d as one GEMM whose BGRADB epilogue
// writes grad_b:[N] (the column sums of g2d: the reduction over the GEMM's k = M). Where
// cuBLASLt has no such kernel (f64, some layouts) the bias gradient is a separate sum.
void linear_weight_grad_kernel(const Tensor& g2d, const Tensor& x2d, Tensor& grad_w,
                               Tensor& grad_b) {
  constexpr const char* op = "linear_weight_grad";
  check_gemm_dtype(g2d.dtype(), op);
  if (grad_w.numel() == 0 && !(grad_b.defined() && grad_b.numel() > 0)) return;
  TensorDeviceGuard guard(grad_w);
  const cudaStream_t stream = stream_of(grad_w);
  if (g2d.size(0) == 0) {  // no rows: both gradients are zero
    MINIDL_CUDA_CHECK(cudaMemsetAsync(grad_w.data_ptr(), 0, grad_w.nbytes(), stream));
    if (grad_b.defined())
      MINIDL_CUDA_CHECK(cudaMemsetAsync(grad_b.data_ptr(), 0, grad_b.nbytes(), stream));
    return;
  }
  const Tensor a = native::unsqueeze(native::t(g2d), 0);  // [1,N,M]
  const Tensor b = native::unsqueeze(x2d, 0);             // [1,M,K]
  Tensor c = native::unsqueeze(grad_w, 0);                // [1,N,K]
  const bool fused_bias = grad_b.defined() && grad_w.numel() > 0 && grad_b.dtype() != kFloat64;
  if (fused_bias && lt_matmul(a, b, c, grad_b.data_ptr(), Epilogue::bgradb, op)) return;
  if (grad_w.numel() > 0 && !lt_matmul(a, b, c, nullptr, Epilogue::none, op)) {
    // f32 buffers for 16-bit inputs without a cuBLASLt algorithm: the 16-bit product, widened
    Tensor narrow = empty(grad_w.shape(), g2d.dtype(), grad_w.device());
    Tensor narrow3 = native::unsqueeze(narrow, 0);
    lt_matmul(a, b, narrow3, nullptr, Epilogue::none, op);
    native::copy_(grad_w, narrow);
  }
  if (grad_b.defined())
    native::copy_(
        grad_b,
        native::sum(g2d.dtype() == grad_b.dtype() ? g2d : native::to(g2d, grad_b.dtype()), {0}));
}
}  // namespace

void register_linalg_kernels() {
  register_kernel<Op::bmm>(DeviceType::cuda, bmm_kernel);
  register_kernel<Op::linear_bias>(DeviceType::cuda, linear_bias_kernel);
  register_kernel<Op::linear_weight_grad>(DeviceType::cuda, linear_weight_grad_kernel);
  register_kernel<Op::linear_gelu>(DeviceType::cuda, linear_gelu_kernel);
  register_kernel<Op::matmul_gelu_backward>(DeviceType::cuda, matmul_gelu_backward_kernel);
}

}  // namespace minidl::cuda
