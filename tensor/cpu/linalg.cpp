// CPU kernels: linalg family. gemm_f32/gemm_f64 (tensor/cpu/gemm.h) on Eigen's GEMM, and
// bmm a:[B,M,K] x b:[B,K,N] -> out:[B,M,N] for any strides (transposed views without copies).
#include <Eigen/Core>
#include <algorithm>
#include <type_traits>
#include <vector>

#include "tensor/cpu/gemm.h"
#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/cpu/onednn.h"
#include "tensor/dispatch.h"
#include "tensor/ops.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace minidl::cpu {
namespace {

template <typename T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ColMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
template <typename M>
using ConstMap = Eigen::Map<const M, Eigen::Unaligned, Eigen::OuterStride<>>;

// Below this M+N+K, Eigen's coefficient-based (lazy) product beats packing + GEBP.
constexpr int64_t kLazyProductDims = 24;
// Below this M*N*K a single thread does the whole GEMM.
constexpr int64_t kThreadedGemmWork = int64_t(1) << 18;

// Eigen sizes kc so that an mr x kc + kc x nr panel pair fits L1; twice that (kc ~512 for f32)
// measured 5-10% faster at 1024^3 and 4096x4096x512 on Zen 4 (AMD EPYC). Set once while the
// library loads, before any thread runs a kernel: Eigen keeps these sizes in a global that its
// own GEMMs (conv's im2col products) read, so setting them lazily raced with those readers
// (ThreadSanitizer, DataParallel replica threads) and made conv's blocking depend on whether
// a matmul had run before.
[[maybe_unused]] const bool kEigenCacheSizesTuned = [] {
  Eigen::setCpuCacheSizes(2 * Eigen::l1CacheSize(), Eigen::l2CacheSize(), Eigen::l3CacheSize());
  return true;
}();

// Eigen's GEMM blocking (cache block sizes from Eigen's heuristic) with the packing buffers
// kept per thread across calls: Eigen's own gemm_blocking_space allocates and zero-fills them
// on every call, which costs ~30% at 256^3.
template <typename T>
struct CachedBlocking : Eigen::internal::level3_blocking<T, T> {
  CachedBlocking(int64_t M, int64_t N, int64_t K) {
    // Row-major C is computed as the column-major C^T = op(B)^T op(A)^T: rows N, cols M.
    Eigen::Index kc = K, mc = N, nc = M;
    Eigen::internal::computeProductBlockingSizes<T, T, 1>(kc, mc, nc, Eigen::Index(1));
    this->m_kc = kc;
    this->m_mc = mc;
    this->m_nc = nc;
    thread_local std::vector<T, Eigen::aligned_allocator<T>> buf_a, buf_b;
    if (buf_a.size() < size_t(kc * mc)) buf_a.resize(size_t(kc * mc));
    if (buf_b.size() < size_t(kc * nc)) buf_b.resize(size_t(kc * nc));
    this->m_blockA = buf_a.data();
    this->m_blockB = buf_b.data();
  }
};

// C += alpha * op(A) op(B) on one thread. Large sizes call Eigen's blocked GEMM
// (general_matrix_matrix_product, as Eigen's own BLAS does) with no parallel info, so Eigen
// never spawns threads here; tiny sizes use a lazy product.
template <typename T>
void gemm_acc_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha,
                     const T* A, int64_t lda, const T* B, int64_t ldb, T* C, int64_t ldc) {
  using Eigen::ColMajor;
  using Eigen::Index;
  using Eigen::RowMajor;
  if (M + N + K < kLazyProductDims) {
    Eigen::Map<RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>> c(C, M, N,
                                                                    Eigen::OuterStride<>(ldc));
    using RA = ConstMap<RowMat<T>>;
    using CA = ConstMap<ColMat<T>>;
    Eigen::OuterStride<> sa(lda), sb(ldb);
    auto run = [&](const auto& a, const auto& b) { c.noalias() += alpha * a.lazyProduct(b); };
    if (!trans_a && !trans_b)
      run(RA(A, M, K, sa), RA(B, K, N, sb));
    else if (!trans_a && trans_b)
      run(RA(A, M, K, sa), CA(B, K, N, sb));
    else if (trans_a && !trans_b)
      run(CA(A, M, K, sa), RA(B, K, N, sb));
    else
      run(CA(A, M, K, sa), CA(B, K, N, sb));
    return;
  }
  namespace ei = Eigen::internal;
  CachedBlocking<T> blocking(M, N, K);
  // A row-major [M,K] is a RowMajor lhs; trans_a (row-major [K,M]) is a ColMajor lhs.
  auto run = [&]<int LO, int RO>() {
    ei::general_matrix_matrix_product<Index, T, LO, false, T, RO, false, RowMajor, 1>::run(
        M, N, K, A, lda, B, ldb, C, 1, ldc, alpha, blocking, nullptr);
  };
  if (!trans_a && !trans_b)
    run.template operator()<RowMajor, RowMajor>();
  else if (!trans_a && trans_b)
    run.template operator()<RowMajor, ColMajor>();
  else if (trans_a && !trans_b)
    run.template operator()<ColMajor, RowMajor>();
  else
    run.template operator()<ColMajor, ColMajor>();
}

// C = alpha * op(A) op(B) + beta * C. Multithreaded by splitting C into one slab per thread
// along the larger of M and N, each slab a single-threaded GEMM: no synchronisation inside the
// product (Eigen's own parallel GEMM spin-waits between threads, which collapses when a core
// is shared with another process), only the join at the end.
template <typename T>
void gemm_impl(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
               int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (beta != T(1)) {  // beta == 0 overwrites without reading C (NaN-safe)
    Eigen::Map<RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>> c(C, M, N,
                                                                    Eigen::OuterStride<>(ldc));
    if (beta == T(0))
      c.setZero();
    else
      c *= beta;
  }
  if (K <= 0 || alpha == T(0)) return;  // BLAS semantics: A and B are not read
  int64_t nt = 1;
#ifdef _OPENMP
  if (!omp_in_parallel() && M * N * K >= kThreadedGemmWork) nt = get_num_threads();
#endif
  const bool split_n = N > M;  // row slabs of C (contiguous) measured faster when M >= N
  const int64_t len = split_n ? N : M;
  // slabs of a multiple of 16 rows/columns (whole register tiles), at least 16
  const int64_t slab = std::max<int64_t>(16, (len + nt * 16 - 1) / (nt * 16) * 16);
  const int64_t nslabs = (len + slab - 1) / slab;
  if (nt <= 1 || nslabs <= 1) {
    gemm_acc_serial<T>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, C, ldc);
    return;
  }
  parallel_for(nslabs, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t lo = s * slab, n = std::min(len, lo + slab) - lo;
      if (split_n)
        gemm_acc_serial<T>(trans_a, trans_b, M, n, K, alpha, A, lda, B + (trans_b ? lo * ldb : lo),
                           ldb, C + lo, ldc);
      else
        gemm_acc_serial<T>(trans_a, trans_b, n, N, K, alpha, A + (trans_a ? lo : lo * lda), lda, B,
                           ldb, C + lo * ldc, ldc);
    }
  });
}

// A batch of R x C matrices inside a [B,R,C] tensor: element (b,i,j) at
// base[b*bstride + i*ld + j] (trans=false) or base[b*bstride + j*ld + i] (trans=true).
template <typename T>
struct MatBatch {
  const T* base;
  int64_t bstride;
  bool trans;
  int64_t ld;
  Tensor keep;  // holds a contiguous copy alive when one was needed
};

// Uses t's own memory when each matrix is row-major (inner stride 1) or column-major (row
// stride 1, a transposed view); otherwise makes a contiguous copy.
template <typename T>
MatBatch<T> plan_batch(const Tensor& t) {
  const int64_t R = t.size(1), C = t.size(2), sr = t.stride(1), sc = t.stride(2);
  if ((sc == 1 || C == 1) && (R == 1 || sr >= std::max<int64_t>(C, 1)))
    return {t.data_ptr<T>(), t.stride(0), false, R == 1 ? std::max<int64_t>(C, 1) : sr, {}};
  if ((sr == 1 || R == 1) && (C == 1 || sc >= std::max<int64_t>(R, 1)))
    return {t.data_ptr<T>(), t.stride(0), true, C == 1 ? std::max<int64_t>(R, 1) : sc, {}};
  Tensor c = native::contiguous(t);
  return {c.data_ptr<T>(), R * C, false, std::max<int64_t>(C, 1), c};
}

// Work per GEMM below which matrices are too small to be worth a thread each.
constexpr int64_t kTinyBatchWork = 1 << 16;
// Work per GEMM above which Eigen's own multithreading pays for a single matrix.
constexpr int64_t kBigGemmWork = 1 << 22;

// f32/f64: Eigen GEMM per matrix; parallel across the batch for many small matrices,
// otherwise a serial loop in which each GEMM multithreads itself.
template <typename T>
void bmm_eigen(const Tensor& a, const Tensor& b, Tensor& out) {
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  MatBatch<T> pa = plan_batch<T>(a), pb = plan_batch<T>(b);
  T* c = out.data_ptr<T>();
  auto one = [&](int64_t i) {
    gemm_impl<T>(pa.trans, pb.trans, M, N, K, T(1), pa.base + i * pa.bstride, pa.ld,
                 pb.base + i * pb.bstride, pb.ld, T(0), c + i * M * N, N);
  };
  const int64_t work = std::max<int64_t>(M * N * K, 1);
  const int64_t nt = get_num_threads();
  const bool serial = B == 1 || work * B < kTinyBatchWork || (work >= kBigGemmWork && B < 2 * nt);
  if (serial) {
    for (int64_t i = 0; i < B; ++i) one(i);
  } else {
    parallel_for(B, std::max<int64_t>(1, kTinyBatchWork / work), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) one(i);
    });
  }
}

// Integer bmm: i-k-j loops over raw strides, wrapping arithmetic (unsigned) like PyTorch.
template <typename T>
void bmm_integer(const Tensor& a, const Tensor& b, Tensor& out) {
  using U = std::make_unsigned_t<T>;
  const int64_t M = out.size(1), N = out.size(2), K = a.size(2);
  const T* pa = a.data_ptr<T>();
  const T* pb = b.data_ptr<T>();
  T* pc = out.data_ptr<T>();
  const int64_t as0 = a.stride(0), as1 = a.stride(1), as2 = a.stride(2);
  const int64_t bs0 = b.stride(0), bs1 = b.stride(1), bs2 = b.stride(2);
  const int64_t rows = out.size(0) * M;
  parallel_for(rows, std::max<int64_t>(1, kTinyBatchWork / std::max<int64_t>(N * K, 1)),
               [&](int64_t lo, int64_t hi) {
                 std::vector<U> acc(static_cast<size_t>(N));
                 for (int64_t r = lo; r < hi; ++r) {
                   const int64_t bi = r / M, i = r % M;
                   std::fill(acc.begin(), acc.end(), U(0));
                   const T* arow = pa + bi * as0 + i * as1;
                   const T* bmat = pb + bi * bs0;
                   for (int64_t k = 0; k < K; ++k) {
                     const U av = U(arow[k * as2]);
                     if (av == 0) continue;
                     const T* brow = bmat + k * bs1;
                     for (int64_t j = 0; j < N; ++j) acc[j] = U(acc[j] + av * U(brow[j * bs2]));
                   }
                   T* crow = pc + r * N;
                   for (int64_t j = 0; j < N; ++j) crow[j] = T(acc[j]);
                 }
               });
}

void bmm_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  if (out.numel() == 0) return;
  if (onednn::bmm(a, b, out)) return;  // oneDNN when the backend choice says so
  // Compute into a contiguous result (out itself when possible).
  Tensor res = out.is_contiguous() ? out : empty(out.shape(), out.dtype(), out.device());
  dispatch_numeric(out.dtype(), "bmm", [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      bmm_eigen<T>(a, b, res);
    } else if constexpr (is_reduced_float_v<T>) {
      // f16/bf16: compute in f32, round once on the final copy.
      Tensor af = native::to(a, kFloat32), bf = native::to(b, kFloat32);
      Tensor rf = empty(out.shape(), kFloat32, out.device());
      bmm_eigen<float>(af, bf, rf);
      native::copy_(res, rf);
    } else if constexpr (std::is_same_v<T, bool>) {
      MINIDL_FAIL("op `bmm` does not support dtype bool");
    } else {
      bmm_integer<T>(a, b, res);
    }
  });
  if (!res.is_same(out)) native::copy_(out, res);
}

}  // namespace

void gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
              const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
              int64_t ldc) {
  note_thread_team(get_num_threads());  // Eigen's OpenMP GEMM
  gemm_impl<float>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_f64(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
              const double* A, int64_t lda, const double* B, int64_t ldb, double beta, double* C,
              int64_t ldc) {
  note_thread_team(get_num_threads());  // Eigen's OpenMP GEMM
  gemm_impl<double>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// linear_bias on the CPU: oneDNN for f16/bf16 (the bias added to the f32 accumulator) when it
// takes the shape; otherwise the GEMM (bmm's kernel, a batch of one) then the bias add, which
// for f32/f64 is bitwise the unfused matmul + add_. x2d:[M,K] w:[N,K] bias:[N] -> out:[M,N].
bool linear_bias_kernel(const Tensor& x2d, const Tensor& w, const Tensor& bias, Tensor& out) {
  const DType dt = out.dtype();
  if ((dt == kBFloat16 || dt == kFloat16) && onednn::linear_bias(x2d, w, bias, out)) return true;
  Tensor out3d = native::unsqueeze(out, 0);  // [1,M,N], a view of out
  bmm_kernel(native::unsqueeze(x2d, 0), native::unsqueeze(native::t(w), 0), out3d);
  native::add_(out, bias);
  return true;
}

// linear_gelu on the CPU: linear_bias's kernel into pre, then gelu_tanh's into out (bitwise the
// two ops). x2d:[M,K] w:[N,K] bias:[N] -> pre, out:[M,N].
void linear_gelu_kernel(const Tensor& x2d, const Tensor& w, const Tensor& bias, Tensor& pre,
                        Tensor& out) {
  linear_bias_kernel(x2d, w, bias, pre);
  kernel<Op::gelu_tanh>(DeviceType::cpu)(pre, out);
}

// matmul_gelu_backward on the CPU: the input-gradient GEMM as matmul computes it, then
// gelu_tanh_backward's kernel (bitwise the two ops). g2d:[M,N] w:[N,K] pre2d, out:[M,K].
void matmul_gelu_backward_kernel(const Tensor& g2d, const Tensor& w, const Tensor& pre2d,
                                 Tensor& out) {
  const Tensor gx = native::matmul(g2d, w);
  kernel<Op::gelu_tanh_backward>(DeviceType::cpu)(gx, pre2d, out);
}

// linear_weight_grad on the CPU: grad_w = g2d^T x2d as one GEMM on a transposed view (bmm's
// kernel, a batch of one), grad_b = the column sums of g2d (the sum op's kernel). f32 buffers
// for f16/bf16 inputs: the product accumulates in f32 with no 16-bit rounding of the result
// (what cuBLASLt's f32 output gives): bf16 on oneDNN's native bf16 kernels where the CPU has
// them, else the inputs widen exactly to f32 for the f32 GEMM.
void linear_weight_grad_kernel(const Tensor& g2d, const Tensor& x2d, Tensor& grad_w,
                               Tensor& grad_b) {
  if (grad_w.dtype() == kFloat32 && g2d.dtype() == kBFloat16 && x2d.size(0) > 0) {
    Tensor gw3 = native::unsqueeze(grad_w, 0);  // [1,N,K], a view of grad_w
    if (onednn::bmm_widened(native::unsqueeze(native::t(g2d), 0), native::unsqueeze(x2d, 0), gw3)) {
      if (grad_b.defined()) native::copy_(grad_b, native::sum(native::to(g2d, kFloat32), {0}));
      return;
    }
  }
  if (grad_w.dtype() != g2d.dtype()) {
    linear_weight_grad_kernel(native::to(g2d, grad_w.dtype()), native::to(x2d, grad_w.dtype()),
                              grad_w, grad_b);
    return;
  }
  Tensor gw3 = native::unsqueeze(grad_w, 0);  // [1,N,K], a view of grad_w
  if (x2d.size(0) == 0) {
    native::fill_(grad_w, 0);
  } else {
    bmm_kernel(native::unsqueeze(native::t(g2d), 0), native::unsqueeze(x2d, 0), gw3);
  }
  if (grad_b.defined()) native::copy_(grad_b, native::sum(g2d, {0}));
}

void register_linalg_kernels() {
  register_kernel<Op::bmm>(DeviceType::cpu, bmm_kernel);
  register_kernel<Op::linear_bias>(DeviceType::cpu, linear_bias_kernel);
  register_kernel<Op::linear_weight_grad>(DeviceType::cpu, linear_weight_grad_kernel);
  register_kernel<Op::linear_gelu>(DeviceType::cpu, linear_gelu_kernel);
  register_kernel<Op::matmul_gelu_backward>(DeviceType::cpu, matmul_gelu_backward_kernel);
}

}  // namespace minidl::cpu
