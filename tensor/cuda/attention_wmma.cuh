// Tensor-core (WMMA) building blocks of attention_wmma.cu (forward) and
// attention_wmma_backward.cu: the 64-row tiles, 4 warps of 16 rows, the element type, tile loads
// and the two per-warp products.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include "tensor/cuda/attention.cuh"

namespace minidl::cuda::attention_detail {

namespace wm = nvcuda::wmma;

inline constexpr int kTile = 64;    // rows per block and per tile of the other side
inline constexpr int kTcWarps = 4;  // 16 rows each
inline constexpr int kTcThreads = kTcWarps * 32;

// The WMMA element type of T = Half / BFloat16 and the conversion from f32.
template <typename T>
struct Wmma;
template <>
struct Wmma<Half> {
  using type = __half;
  __device__ static type from(float x) { return __float2half(x); }
};
template <>
struct Wmma<BFloat16> {
  using type = __nv_bfloat16;
  __device__ static type from(float x) { return __float2bfloat16(x); }
};

// Copies rows [r0, r0 + 64) of a [rows][cols] matrix of 16-bit values (row stride ld, unit
// stride in a row; 2-byte loads: any alignment) into a [64][cols] tile, zeros past `rows`.
__device__ inline void load_tile(uint16_t* dst, const uint16_t* src, int64_t r0, int64_t rows,
                                 int cols, int64_t ld) {
  for (int x = int(threadIdx.x); x < kTile * cols; x += kTcThreads) {
    const int64_t r = r0 + x / cols;
    dst[x] = r < rows ? src[r * ld + x % cols] : uint16_t(0);
  }
}

// C[16][64] (row-major, ld kTile) = A[16][K] B[64][K]^T for a warp: A row-major (ld lda), B
// row-major [64][K] read as col-major (ld ldb).
template <typename W>
__device__ inline void warp_abt(float* c, const W* a, int lda, const W* b, int ldb, int K) {
  for (int nt = 0; nt < kTile / 16; ++nt) {
    wm::fragment<wm::accumulator, 16, 16, 16, float> acc;
    wm::fill_fragment(acc, 0.f);
    for (int kk = 0; kk < K / 16; ++kk) {
      wm::fragment<wm::matrix_a, 16, 16, 16, W, wm::row_major> fa;
      wm::fragment<wm::matrix_b, 16, 16, 16, W, wm::col_major> fb;
      wm::load_matrix_sync(fa, a + kk * 16, lda);
      wm::load_matrix_sync(fb, b + nt * 16 * ldb + kk * 16, ldb);
      wm::mma_sync(acc, fa, fb, acc);
    }
    wm::store_matrix_sync(c + nt * 16, acc, kTile, wm::mem_row_major);
  }
}

// C[16][N] (f32, row-major, ld N) += A[16][64] (row-major, ld kTile) B[64][N] (row-major, ld N).
template <typename W>
__device__ inline void warp_acc_ab(float* c, const W* a, const W* b, int N) {
  for (int nt = 0; nt < N / 16; ++nt) {
    wm::fragment<wm::accumulator, 16, 16, 16, float> acc;
    wm::load_matrix_sync(acc, c + nt * 16, N, wm::mem_row_major);
    for (int kk = 0; kk < kTile / 16; ++kk) {
      wm::fragment<wm::matrix_a, 16, 16, 16, W, wm::row_major> fa;
      wm::fragment<wm::matrix_b, 16, 16, 16, W, wm::row_major> fb;
      wm::load_matrix_sync(fa, a + kk * 16, kTile);
      wm::load_matrix_sync(fb, b + kk * 16 * N + nt * 16, N);
      wm::mma_sync(acc, fa, fb, acc);
    }
    wm::store_matrix_sync(c + nt * 16, acc, N, wm::mem_row_major);
  }
}

}  // namespace minidl::cuda::attention_detail
