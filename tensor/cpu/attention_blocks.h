// Block math of the CPU attention kernel (attention.cpp): aligned scratch, the block GEMM
// (oneDNN sgemm on one thread, or Eigen), and exp / max / sum over a score row in an order that
// depends only on the row length, so results are bitwise repeatable for any thread count.
#pragma once
#include <Eigen/Core>
#include <Eigen/StdVector>
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "tensor/cpu/onednn.h"
#include "tensor/cpu_isa.h"
#include "tensor/dtype.h"

#if MINIDL_WITH_ONEDNN
#include <dnnl.h>
#include <omp.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MINIDL_SDPA_AVX512 1
#endif

namespace minidl::cpu::attention_detail {

template <typename A>
using Mat = Eigen::Matrix<A, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename A>
using MMap = Eigen::Map<Mat<A>>;
template <typename A>
using CMap = Eigen::Map<const Mat<A>>;
template <typename A>
using RowArr = Eigen::Map<Eigen::Array<A, Eigen::Dynamic, 1>>;

// Scratch buffers aligned like Eigen's packets: Eigen's elementwise maps peel scalar head
// elements by address alignment, and its scalar and vector exp differ by an ulp, so unaligned
// scratch would make results depend on where malloc put it (not bitwise repeatable).
template <typename A>
using Buf = std::vector<A, Eigen::aligned_allocator<A>>;

template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// c[M,N] = alpha * op(a) op(b) + beta * c, row-major with leading dims (gemm.h's convention).
// Float runs oneDNN's sgemm (JIT, AVX-512 where the CPU has it; one thread: the callers run in
// parallel_for tasks, so the result does not depend on the thread count) unless the CPU
// backend is forced to Eigen; f64 runs Eigen.
template <typename A>
void gemm_blk(bool ta, bool tb, int64_t M, int64_t N, int64_t K, A alpha, const A* a, int64_t lda,
              const A* b, int64_t ldb, A beta, A* c, int64_t ldc) {
#if MINIDL_WITH_ONEDNN
  if constexpr (std::is_same_v<A, float>) {
    if (cpu_backend() != CpuBackend::eigen &&
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, a, lda, b, ldb, beta, c, ldc) ==
            dnnl_success)
      return;
  }
#endif
  using S = Eigen::OuterStride<>;
  using CM = Eigen::Map<const Mat<A>, 0, S>;
  Eigen::Map<Mat<A>, 0, S> C(c, M, N, S(ldc));
  if (beta == A(0))
    C.setZero();
  else if (beta != A(1))
    C *= beta;
  const CM Am(a, ta ? K : M, ta ? M : K, S(lda)), Bm(b, tb ? N : K, tb ? K : N, S(ldb));
  if (ta && tb)
    C.noalias() += alpha * (Am.transpose() * Bm.transpose());
  else if (ta)
    C.noalias() += alpha * (Am.transpose() * Bm);
  else if (tb)
    C.noalias() += alpha * (Am * Bm.transpose());
  else
    C.noalias() += alpha * (Am * Bm);
}

// Sets OpenMP's thread count to 1 on this thread while alive: oneDNN's sgemm inside a task
// must not fan out (that would tie its summation order to the thread count).
struct SingleThreaded {
#if MINIDL_WITH_ONEDNN
  int saved = omp_get_max_threads();
  SingleThreaded() {
    omp_set_num_threads(1);
  }
  ~SingleThreaded() {
    omp_set_num_threads(saved);
  }
#else
  SingleThreaded() {}  // user-provided: no unused-variable warning at the call sites
#endif
  SingleThreaded(const SingleThreaded&) = delete;
  SingleThreaded& operator=(const SingleThreaded&) = delete;
};

#if MINIDL_SDPA_AVX512
// x[j] = exp(x[j] - shift) on 16 lanes (Cephes expf: n = round(y log2 e), y - n ln 2 in two
// parts, degree-6 polynomial, times 2^n; ~1 ulp; below -87.3 (FLT_MIN) gives 0, NaN stays
// NaN). The tail runs masked through the same code, so each result depends only on its input.
__attribute__((target("avx512f"))) inline void exp_shifted_avx512(float* x, int64_t n,
                                                                  float shift) {
  const __m512 sh = _mm512_set1_ps(shift), lo = _mm512_set1_ps(-87.3f), hi = _mm512_set1_ps(88.7f),
               log2e = _mm512_set1_ps(1.44269504088896341f), c1 = _mm512_set1_ps(0.693359375f),
               c2 = _mm512_set1_ps(-2.12194440e-4f), one = _mm512_set1_ps(1.0f);
  const __mmask16 all = 0xffff;  // maskz forms: GCC 12 warns on the unmasked ones' undefined
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = n - j >= 16 ? all : __mmask16((1u << (n - j)) - 1);
    const __m512 y = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + j), sh);
    const __mmask16 under = _mm512_cmp_ps_mask(y, lo, _CMP_LT_OQ);
    const __m512 yc =
        _mm512_maskz_max_ps(all, lo, _mm512_maskz_min_ps(all, hi, y));  // NaN passes through
    const __m512 k =
        _mm512_maskz_roundscale_ps(all, _mm512_mul_ps(yc, log2e), _MM_FROUND_TO_NEAREST_INT);
    const __m512 r = _mm512_fnmadd_ps(k, c2, _mm512_fnmadd_ps(k, c1, yc));
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    const __m512 e = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, one));
    const __m512 res =
        _mm512_mask_mov_ps(_mm512_maskz_scalef_ps(all, e, k), under, _mm512_setzero_ps());
    _mm512_mask_storeu_ps(x + j, m, res);
  }
}
#endif

// x[j] = exp(x[j] - shift) for j < n; x aligned for Eigen's packets. f32 on a CPU with
// AVX-512 (cpu_isa(), so MINIDL_CPU_ISA=avx2 caps it) takes the 16-lane kernel above, the rest
// Eigen's array exp.
template <typename A>
void exp_shifted(A* x, int64_t n, A shift) {
#if MINIDL_SDPA_AVX512
  if constexpr (std::is_same_v<A, float>) {
    if (cpu_isa() >= CpuIsa::avx512) return exp_shifted_avx512(x, n, shift);
  }
#endif
  RowArr<A> row(x, n);
  row = (row - shift).exp();
}

// Max and sum of x[0..n) in a fixed order that vectorises: 8 lanes over the index (lane =
// index mod 8), then the lanes in order. The order depends only on n, never on x's address
// (Eigen's reductions peel by alignment: results would differ from run to run by an ulp).
template <typename A>
A lane_max(const A* x, int64_t n) {
  constexpr int64_t W = 8;
  A part[W];
  for (int64_t l = 0; l < W; ++l) part[l] = -std::numeric_limits<A>::infinity();
  int64_t j = 0;
  for (; j + W <= n; j += W)
    for (int64_t l = 0; l < W; ++l) part[l] = part[l] < x[j + l] ? x[j + l] : part[l];
  for (int64_t l = 0; j < n; ++j, ++l) part[l] = part[l] < x[j] ? x[j] : part[l];
  A r = part[0];
  for (int64_t l = 1; l < W; ++l) r = r < part[l] ? part[l] : r;
  return r;
}
template <typename A>
A lane_sum(const A* x, int64_t n) {
  constexpr int64_t W = 8;
  A part[W] = {};
  int64_t j = 0;
  for (; j + W <= n; j += W)
    for (int64_t l = 0; l < W; ++l) part[l] += x[j + l];
  for (int64_t l = 0; j < n; ++j, ++l) part[l] += x[j];
  A r = part[0];
  for (int64_t l = 1; l < W; ++l) r += part[l];
  return r;
}

}  // namespace minidl::cpu::attention_detail
