// The CPU math backend switch (Eigen or oneDNN; MINIDL_CPU_BACKEND=eigen|onednn|auto) and the
// oneDNN entry points that the conv2d and bmm CPU kernels try first. Without oneDNN at configure
// time (MINIDL_ONEDNN=OFF or no libdnnl-dev) every entry point declines and Eigen runs.
#pragma once
#include <cstdint>

#include "tensor/dispatch.h"

namespace minidl {

// eigen: always the Eigen kernels. onednn: oneDNN for every call it supports (f32 and bf16;
// f64, f16 and integers always stay on Eigen). automatic: per op, shape class and dtype, the
// faster of the two on the CPU this was measured on (the decision table in README.md).
enum class CpuBackend : uint8_t { eigen, onednn, automatic };

// The backend in force: set_cpu_backend's value, else MINIDL_CPU_BACKEND (read once; unset
// means automatic). Throws when `onednn` is asked for in a build without oneDNN.
CpuBackend cpu_backend();
void set_cpu_backend(CpuBackend backend);
const char* cpu_backend_name(CpuBackend backend);
// Whether this build has oneDNN.
bool onednn_available();
// oneDNN primitives executed so far (convolutions and matmuls, not reorders): lets tests
// check which path ran.
int64_t onednn_executions();

// How oneDNN computes bf16 convolutions and matmuls. bf16: its bf16 kernels, native on CPUs with
// avx512_bf16 or AMX, emulated on other AVX-512 CPUs (3-8x slower than its f32 kernels there),
// absent below AVX-512 (then f32 is used whatever the setting). f32: its f32 kernels on operands
// that minidl widens (a bounded chunk at a time), the result rounded once by minidl (the same
// exact products and f32 sums as the bf16 kernels). automatic (default;
// MINIDL_ONEDNN_BF16=bf16|f32|auto): bf16 where the CPU has native bf16, else f32. Every CPU
// test here follows cpu_isa() (tensor/cpu_isa.h), so MINIDL_CPU_ISA caps it.
enum class Bf16Compute : uint8_t { bf16, f32, automatic };
void set_onednn_bf16_compute(Bf16Compute compute);
// Whether this build's oneDNN runs native bf16 kernels on this CPU (avx512_bf16 or AMX).
bool onednn_native_bf16();
// Whether this build's oneDNN has bf16 kernels at all on this CPU (native or emulated: AVX-512).
bool onednn_bf16_kernels();
// Whether bf16 convolutions and matmuls on oneDNN compute in f32 now (the setting, the CPU).
bool onednn_bf16_in_f32();

namespace cpu::onednn {

// Each returns true when oneDNN computed the result (the backend choice says so and oneDNN
// implements the case), false when the caller's Eigen path must run. Same contracts as the
// Conv2dKernel / Conv2dBackwardKernel / bmm kernels in tensor/dispatch.h.
bool conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
            const Conv2dParams& p);
bool conv2d_backward_input(const Tensor& grad_out, const Tensor& w, Tensor& grad_x,
                           const Conv2dParams& p);
bool conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, Tensor& grad_w,
                            const Conv2dParams& p);
bool bmm(const Tensor& a, const Tensor& b, Tensor& out);
// out[B,M,N] f32 = a[B,M,K] b[B,K,N] of bf16 operands on oneDNN's native bf16 kernels: exact
// products, f32 accumulation, the result never rounded to bf16 (nn::Linear's f32 dW under
// autocast). False unless oneDNN runs bf16 natively now (onednn_bf16_in_f32() false) and
// takes the case; then the caller widens the operands itself.
bool bmm_widened(const Tensor& a, const Tensor& b, Tensor& out);
// out[M,N] = x[M,K] w[N,K]^T + bias[N], the bias added to the f32 accumulator (one rounding);
// any x/w strides, contiguous out and bias, one dtype.
bool linear_bias(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out);

// The ops the backend choice distinguishes.
enum class OpClass : uint8_t { conv_forward, conv_backward_input, conv_backward_weight, matmul };

// Whether `automatic` picks oneDNN for this op, dtype and problem: conv uses (N, C/groups,
// O/groups, kernel area, groups == channels), matmul uses (B, M, N, K).
bool auto_prefers_onednn(OpClass op, DType dtype, const int64_t* dims);

}  // namespace cpu::onednn
}  // namespace minidl
