// CUDA reduction machinery shared by reduce.cu and reduce_arg.cu: a reducer R (per-thread
// Acc, mergeable State, output writer) is run over x:[outer, K] rows (8 threads, a warp or a
// block per row, 16-byte loads) or x:[O, K, M] columns (threads across M); long reductions into few
// outputs are split into partial States merged by a second kernel in a fixed order (deterministic).
#pragma once
#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "tensor/cuda/runtime/common.cuh"
#include "tensor/ops.h"

namespace minidl::cuda::reduce_detail {

inline constexpr int kRowBlock = 256;  // threads of a row-kernel block
inline constexpr int kColX = 32;       // columns of a column-kernel block
inline constexpr int kColY = 8;        // K-slices of a column-kernel block
inline constexpr unsigned kFull = 0xffffffffu;

// Warp shuffle of any 4-byte-multiple State.
template <typename S>
__device__ inline S shfl_down(const S& s, int delta) {
  static_assert(sizeof(S) % 4 == 0, "State size must be a multiple of 4 bytes");
  constexpr int W = int(sizeof(S) / 4);
  unsigned w[W];
  memcpy(w, &s, sizeof(S));
#pragma unroll
  for (int i = 0; i < W; ++i) w[i] = __shfl_down_sync(kFull, w[i], delta);
  S r;
  memcpy(&r, w, sizeof(S));
  return r;
}

// Fixed-order tree over aligned groups of `width` lanes (a power of two <= 32); the result is
// in each group's first lane.
template <typename R, typename S>
__device__ inline S warp_merge(const R& r, S s, int width = 32) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1)
    if (d < width) s = r.merge(s, shfl_down(s, d));
  return s;
}

template <typename T>
struct alignas(16) Vec16 {
  T v[16 / sizeof(T)];
};

// Per-thread walk of p[k0, k1) (element index k) with lane `lane` of `nthreads`: an unaligned
// head, 16-byte vectors (4 in flight), then the tail.
template <typename T, typename R>
__device__ inline typename R::Acc thread_rows(const R& r, const T* __restrict__ p, int64_t k0,
                                              int64_t k1, int lane, int nthreads) {
  constexpr int V = 16 / int(sizeof(T));
  using Vec = Vec16<T>;
  typename R::Acc acc = r.init();
  const int64_t n = k1 - k0;
  const T* base = p + k0;
  const int64_t mis = int64_t(reinterpret_cast<uintptr_t>(base) % 16) / int64_t(sizeof(T));
  const int64_t head = mis == 0 ? 0 : std::min<int64_t>(n, V - mis);
  for (int64_t k = lane; k < head; k += nthreads) acc = r.step(acc, base[k], k0 + k);  // head < 16
  const int64_t nvec = (n - head) / V;
  const Vec* vp = reinterpret_cast<const Vec*>(base + head);
  int64_t i = lane;
  for (; i + 3 * nthreads < nvec; i += 4 * int64_t(nthreads)) {
    Vec v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = vp[i + u * nthreads];
#pragma unroll
    for (int u = 0; u < 4; ++u)
#pragma unroll
      for (int j = 0; j < V; ++j)
        acc = r.step(acc, v[u].v[j], k0 + head + (i + u * nthreads) * V + j);
  }
  for (; i < nvec; i += nthreads) {
    const Vec v = vp[i];
#pragma unroll
    for (int j = 0; j < V; ++j) acc = r.step(acc, v.v[j], k0 + head + i * V + j);
  }
  for (int64_t k = head + nvec * V + lane; k < n; k += nthreads) acc = r.step(acc, base[k], k0 + k);
  return acc;
}

// x:[outer, K] contiguous. Task t = (row t / splits, chunk t % splits of `chunk` elements) is
// reduced by a group of gthreads threads (8 or 32: groups within a warp; 256: the whole block);
// the result goes to out (splits == 1) or to partial[t]. Loop trips are uniform per warp.
template <typename T, typename R>
__global__ void __launch_bounds__(kRowBlock)
    row_kernel(const T* __restrict__ x, int64_t outer, int64_t K, int64_t chunk, int64_t splits,
               int gthreads, R r, typename R::State* __restrict__ partial) {
  using S = typename R::State;
  __shared__ S smem[kRowBlock / 32];
  const int groups = blockDim.x / gthreads, gpw = gthreads >= 32 ? 1 : 32 / gthreads;
  const int lane = threadIdx.x % gthreads, g = threadIdx.x / gthreads;
  const int64_t tasks = outer * splits;
  for (int64_t base = int64_t(blockIdx.x) * groups + (g - g % gpw); base < tasks;
       base += int64_t(gridDim.x) * groups) {
    const int64_t t = base + g % gpw;
    const bool valid = t < tasks;
    const int64_t row = valid ? t / splits : 0, k0 = valid ? (t % splits) * chunk : 0;
    const int64_t k1 = valid ? min(K, k0 + chunk) : 0;
    S s = r.state(thread_rows(r, x + row * K, k0, k1, lane, gthreads));
    s = warp_merge(r, s, gthreads);
    if (gthreads > 32) {  // the block is one group: every thread runs the same tasks
      const int w = threadIdx.x / 32;
      __syncthreads();  // smem reuse across tasks
      if (threadIdx.x % 32 == 0) smem[w] = s;
      __syncthreads();
      if (w == 0) {
        s = threadIdx.x < gthreads / 32 ? smem[threadIdx.x] : r.state(r.init());
        s = warp_merge(r, s);
      }
    }
    if (lane == 0 && valid) {
      if (splits == 1)
        r.write(row, s, K);
      else
        partial[t] = s;
    }
  }
}

// x:[O, K, M] contiguous reduced over K: column c = o*M + m, K-chunk blockIdx.y of `chunk`;
// block (kColX, kColY): threads across columns, slices of K merged through shared memory.
template <typename T, typename R>
__global__ void __launch_bounds__(kColX* kColY)
    col_kernel(const T* __restrict__ x, int64_t O, int64_t K, int64_t M, int64_t chunk, R r,
               typename R::State* __restrict__ partial) {
  using S = typename R::State;
  __shared__ S smem[kColY][kColX];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t ncols = O * M, c = int64_t(blockIdx.x) * kColX + tx;
  const int64_t k0 = int64_t(blockIdx.y) * chunk, k1 = min(K, k0 + chunk);
  typename R::Acc acc = r.init();
  if (c < ncols) {
    const T* p = x + (c / M) * K * M + c % M;
#pragma unroll 4
    for (int64_t k = k0 + ty; k < k1; k += kColY) acc = r.step(acc, p[k * M], k);
  }
  smem[ty][tx] = r.state(acc);
  __syncthreads();
#pragma unroll
  for (int h = kColY / 2; h > 0; h >>= 1) {
    if (ty < h) smem[ty][tx] = r.merge(smem[ty][tx], smem[ty + h][tx]);
    __syncthreads();
  }
  if (ty == 0 && c < ncols) {
    if (gridDim.y == 1)
      r.write(c, smem[0][tx], K);
    else
      partial[int64_t(blockIdx.y) * ncols + c] = smem[0][tx];
  }
}

// One warp per output o: merges partial[o*os + s*ss], s < splits, in a fixed order.
template <typename R>
__global__ void merge_kernel(const typename R::State* __restrict__ partial, int64_t nout,
                             int64_t splits, int64_t os, int64_t ss, int64_t K, R r) {
  using S = typename R::State;
  const int lane = threadIdx.x % 32, wpb = blockDim.x / 32;
  for (int64_t o = int64_t(blockIdx.x) * wpb + threadIdx.x / 32; o < nout;
       o += int64_t(gridDim.x) * wpb) {
    S s = r.state(r.init());
    for (int64_t i = lane; i < splits; i += 32) s = r.merge(s, partial[o * os + i * ss]);
    s = warp_merge(r, s);
    if (lane == 0) r.write(o, s, K);
  }
}

// ---- host side
inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The input seen as rows [outer, K] (cols == false) or columns [O, K, M] (cols == true).
struct Plan {
  Tensor x;
  bool cols = false;
  int64_t O = 1, K = 1, M = 1;
};

// dims: sorted unique dims of in. Reads in directly when the reduced dims (brought last) form a
// contiguous view, or when in is contiguous and the dims one run with >= 16 kept elements after
// it; otherwise reduces a contiguous copy (kept dims first, reduced dims last).
inline Plan make_plan(const Tensor& in, const DimList& dims) {
  const int64_t nd = in.dim();
  std::vector<bool> red(size_t(nd), false);
  for (int64_t d : dims) red[size_t(d)] = true;
  DimList perm;
  Plan p;
  for (int64_t d = 0; d < nd; ++d)
    if (!red[size_t(d)]) perm.push_back(d), p.O *= in.size(d);
  for (int64_t d = 0; d < nd; ++d)
    if (red[size_t(d)]) perm.push_back(d), p.K *= in.size(d);
  const Tensor pv = nd == 0 ? in : native::permute(in, perm);
  if (pv.is_contiguous()) {
    p.x = pv;
    return p;
  }
  if (in.is_contiguous() && !dims.empty() &&
      dims.back() - dims.front() + 1 == int64_t(dims.size())) {
    int64_t O = 1, M = 1;
    for (int64_t d = 0; d < dims.front(); ++d) O *= in.size(d);
    for (int64_t d = dims.back() + 1; d < nd; ++d) M *= in.size(d);
    if (M >= 16) {
      p.x = in, p.cols = true, p.O = O, p.M = M;
      return p;
    }
  }
  p.x = native::contiguous(pv);
  return p;
}

// Runs reducer r (whose write() targets outputs of p's kept elements) over p.
template <typename T, typename R>
void launch_reduce(const Plan& p, const R& r, int device) {
  using S = typename R::State;
  const cudaStream_t st = compute_stream(device);
  const int64_t sms = sm_count(device);
  const T* x = static_cast<const T*>(p.x.data_ptr());
  const int64_t nout = p.O * p.M;
  if (nout == 0) return;
  auto scratch = [&](int64_t n) {
    return empty({n * int64_t(sizeof(S))}, kUInt8, Device{DeviceType::cuda, device});
  };
  if (!p.cols) {
    const int64_t K = p.K, outer = p.O;
    const int gthreads = K <= 64                                          ? 8
                         : (K <= 512 || (K <= 8192 && outer >= sms * 64)) ? 32
                                                                          : kRowBlock;
    const int64_t groups = kRowBlock / gthreads;
    const int64_t target = sms * 2048 / gthreads;  // groups that fill the device
    int64_t splits = 1;
    if (outer < target)
      splits = std::max<int64_t>(1, std::min(ceil_div(target, outer), K / (gthreads * 16)));
    const int64_t chunk = std::max<int64_t>(64, ceil_div(ceil_div(K, splits), 64) * 64);
    splits = std::max<int64_t>(1, ceil_div(K, chunk));
    const int64_t tasks = outer * splits;
    const unsigned grid = unsigned(std::min(ceil_div(tasks, groups), sms * 32));
    Tensor part = splits > 1 ? scratch(tasks) : Tensor();
    S* pp = splits > 1 ? static_cast<S*>(part.data_ptr()) : nullptr;
    row_kernel<T, R><<<grid, kRowBlock, 0, st>>>(x, outer, K, chunk, splits, gthreads, r, pp);
    MINIDL_CUDA_LAUNCH_CHECK();
    if (splits > 1) {
      merge_kernel<R><<<grid_for(outer * 32), kBlock, 0, st>>>(pp, outer, splits, splits, 1, K, r);
      MINIDL_CUDA_LAUNCH_CHECK();
    }
    return;
  }
  const int64_t cblocks = ceil_div(nout, kColX);
  MINIDL_CHECK(cblocks < (int64_t(1) << 31), "CUDA reduce: too many outputs (", nout, ")");
  const int64_t target = sms * 8;  // 256-thread blocks that fill the device
  int64_t splits = 1;
  if (cblocks < target)
    splits = std::clamp<int64_t>(std::min(ceil_div(target, cblocks), p.K / (kColY * 8)), 1, 65535);
  const int64_t chunk = std::max<int64_t>(1, ceil_div(p.K, splits));
  splits = std::max<int64_t>(1, ceil_div(p.K, chunk));
  Tensor part = splits > 1 ? scratch(splits * nout) : Tensor();
  S* pp = splits > 1 ? static_cast<S*>(part.data_ptr()) : nullptr;
  col_kernel<T, R><<<dim3(unsigned(cblocks), unsigned(splits)), dim3(kColX, kColY), 0, st>>>(
      x, p.O, p.K, p.M, chunk, r, pp);
  MINIDL_CUDA_LAUNCH_CHECK();
  if (splits > 1) {
    merge_kernel<R><<<grid_for(nout * 32), kBlock, 0, st>>>(pp, nout, splits, 1, nout, p.K, r);
    MINIDL_CUDA_LAUNCH_CHECK();
  }
}

// out's data as O* when out is contiguous of dtype `want`, else a temporary that finish()
// copies (with cast) into out.
struct OutBuffer {
  Tensor& out;
  Tensor buf;
  OutBuffer(Tensor& o, DType want)
      : out(o),
        buf(o.is_contiguous() && o.dtype() == want ? o : empty(o.shape(), want, o.device())) {}
  template <typename O>
  O* ptr() const {
    return static_cast<O*>(buf.data_ptr());
  }
  void finish() {
    if (buf.data_ptr() != out.data_ptr() || buf.dtype() != out.dtype()) native::copy_(out, buf);
  }
};

// The max/min order with NaN as the extreme: v strictly better than cur.
template <typename V>
__device__ inline bool better(V v, V cur, bool is_max) {
  if constexpr (std::is_floating_point_v<V>) {
    if (v != v) return cur == cur;
  }
  return is_max ? v > cur : v < cur;
}

// Value type of max/min states: floats as opmath, bool/uint8 widened to int (4-byte shuffles).
template <typename T>
using ExtV =
    std::conditional_t<is_reduced_float_v<T>, float, std::conditional_t<(sizeof(T) < 4), int, T>>;

template <typename T>
ExtV<T> ext_init(bool is_max) {
  if constexpr (is_float_v<T>)
    return is_max ? -std::numeric_limits<ExtV<T>>::infinity()
                  : std::numeric_limits<ExtV<T>>::infinity();
  else
    return is_max ? ExtV<T>(std::numeric_limits<T>::lowest())
                  : ExtV<T>(std::numeric_limits<T>::max());
}

// Registers max_dim / min_dim (reduce_arg.cu).
void register_reduce_arg_kernels();

}  // namespace minidl::cuda::reduce_detail
