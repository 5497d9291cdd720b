// Internal cuBLASLt GEMMs of the CUDA backend: lt_matmul (bmm and the fused nn::Linear kernels
// of tensor/cuda/linalg.cu build on it) and gemm_bias_act, out = act(x w^T + bias) in a single
// call. Plain C++: no CUDA headers. Implemented in tensor/cuda/gemm.cu (only in CUDA builds).
#pragma once
#include "tensor/tensor.h"

namespace minidl::cuda {

// The activation applied after the bias. cuBLASLt's GELU is the tanh approximation, i.e.
// PyTorch's gelu(x, approximate="tanh"), not the exact erf GELU.
// none/relu/gelu_tanh: the output's epilogue (with a bias added first when one is given);
// bgradb: the bias pointer receives the column sums of the right-hand GEMM operand (the
// gradient of a bias, reduced over the GEMM's k dimension). gelu_tanh_aux: gelu_tanh's output,
// and the GELU's input written to an auxiliary matrix (gemm_bias_gelu_aux). dgelu: the product
// times gelu_tanh' of an auxiliary input matrix (the GELU's input; matmul_gelu_backward).
enum class Epilogue { none, relu, gelu_tanh, bgradb, gelu_tanh_aux, dgelu };

// Throws, naming op, unless cuBLASLt multiplies this dtype (f32, f64, f16, bf16).
void check_gemm_dtype(DType t, const char* op);

// c:[B,M,N] contiguous = a:[B,M,K] b:[B,K,N] (+ bias, activation) as one strided-batched
// cuBLASLt GEMM; a and b may be transposed views. K > 0. a and b share a dtype; c has it, or f32
// for f16/bf16 operands (the f32 accumulator kept). bias: the epilogue's [N] vector (bgradb:
// written). aux: the [M,N] auxiliary matrix of gelu_tanh_aux (written) or dgelu (read). Returns
// false when no cuBLASLt algorithm supports the requested epilogue (nothing was queued).
bool lt_matmul(const Tensor& a, const Tensor& b, Tensor& c, const void* bias, Epilogue ep,
               const char* op, void* aux = nullptr);

// x2d:[M,K] w:[N,K] (nn.Linear's [out_features, in_features]) bias:[N] or undefined
// -> out:[M,N] (contiguous, preallocated). One CUDA device, one floating dtype (f32 honours
// allow_tf32(); f16/bf16 accumulate in f32). x2d and w may be transposed views; other
// layouts are copied. Shapes without a fused cuBLASLt kernel (f64, K = 0) fall back to
// matmul + add + activation with the same result.
void gemm_bias_act(const Tensor& x2d, const Tensor& w, const Tensor& bias, Tensor& out,
                   Epilogue ep);

// pre:[M,N] = x2d w^T + bias and out:[M,N] = gelu_tanh(pre) from one cuBLASLt GEMM (its
// GELU_AUX_BIAS epilogue: out is D, pre the auxiliary output). f32/f16/bf16, N % 8 == 0,
// contiguous pre and out. Returns false (nothing queued) where cuBLASLt has no such kernel.
bool gemm_bias_gelu_aux(const Tensor& x2d, const Tensor& w, const Tensor& bias, Tensor& pre,
                        Tensor& out);

}  // namespace minidl::cuda
