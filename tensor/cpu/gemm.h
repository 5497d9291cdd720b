// CPU GEMM entry points (Eigen) for kernels that need a raw matrix product (bmm, conv2d
// im2col, ...). Row-major BLAS-like convention, implemented in tensor/cpu/linalg.cpp.
#pragma once
#include <cstdint>

namespace minidl::cpu {

// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, all row-major with leading dims:
//   trans_a=false: A is [M,K], element (i,k) at A[i*lda + k]   (lda >= K)
//   trans_a=true:  A is [K,M], element (i,k) at A[k*lda + i]   (lda >= M)
//   trans_b=false: B is [K,N], element (k,j) at B[k*ldb + j]   (ldb >= N)
//   trans_b=true:  B is [N,K], element (k,j) at B[j*ldb + k]   (ldb >= K)
//   C is [M,N], element (i,j) at C[i*ldc + j]                 (ldc >= N)
// beta == 0 overwrites C without reading it (NaN/garbage in C is ignored). K == 0 gives
// C = beta*C. Multithreaded through Eigen's OpenMP GEMM when called outside a parallel
// region; single-threaded when called from inside one (e.g. from cpu::parallel_for).
// C must not alias A or B.
void gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
              const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
              int64_t ldc);
void gemm_f64(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
              const double* A, int64_t lda, const double* B, int64_t ldb, double beta, double* C,
              int64_t ldc);

// Overloads for templated callers.
inline void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                 int64_t ldc) {
  gemm_f32(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
inline void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
                 const double* A, int64_t lda, const double* B, int64_t ldb, double beta, double* C,
                 int64_t ldc) {
  gemm_f64(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace minidl::cpu
