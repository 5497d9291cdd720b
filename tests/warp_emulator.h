// Host emulation of CUDA blocks for kernels written over a Warp policy (tensor/cuda/
// flash_attention.cuh): one std::thread per CUDA thread, block and warp barriers, mma.sync
// m16n8k16 (16-bit operands, f32 accumulate) and ldmatrix m8n8.x4 (.trans) by the PTX ISA's
// fragment layouts, shfl_xor, and T's round-to-nearest-even conversions. It checks a kernel's
// tiling, fragment bookkeeping and rounding without a GPU; shared memory starts as NaN bytes so an
// unwritten read shows.
#pragma once
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

namespace minidl::emu {

struct WarpShared {
  std::barrier<> bar{32};
  uint32_t a[32][4] = {};
  uint32_t b[32][2] = {};
  float f[32] = {};
  const uint16_t* rows[32] = {};  // ldmatrix: each lane's row address
};

struct BlockShared {
  explicit BlockShared(int threads) : bar(threads) {
    for (int w = 0; w < threads / 32; ++w) warps.push_back(std::make_unique<WarpShared>());
  }
  std::barrier<> bar;
  std::vector<std::unique_ptr<WarpShared>> warps;
};

// The Warp policy of one emulated lane; T = Half or BFloat16 (the mma operands' type).
template <typename T>
struct Warp {
  BlockShared* block;
  WarpShared* warp;
  int lane;

  void sync_block() { block->bar.arrive_and_wait(); }

  // Element (row, k) of the 16x16 A operand and (k, n) of the 16x8 B operand from the lanes'
  // registers: A reg = row / 8 + 2 (k / 8) of lane (row % 8) * 4 + (k % 8) / 2; B reg = k / 8 of
  // lane n * 4 + (k % 8) / 2; the low half holds the even k.
  float a_at(int row, int k) const {
    const uint32_t r = warp->a[(row % 8) * 4 + (k % 8) / 2][row / 8 + 2 * (k / 8)];
    return float(T::from_bits(uint16_t(k % 2 ? r >> 16 : r & 0xffffu)));
  }
  float b_at(int k, int n) const {
    const uint32_t r = warp->b[n * 4 + (k % 8) / 2][k / 8];
    return float(T::from_bits(uint16_t(k % 2 ? r >> 16 : r & 0xffffu)));
  }
  // c += A B; this lane's c[i] is row lane / 4 + 8 (i / 2), column 2 (lane % 4) + i % 2.
  void mma(float* c, const uint32_t* a, const uint32_t* b) {
    std::memcpy(warp->a[lane], a, sizeof(uint32_t) * 4);
    std::memcpy(warp->b[lane], b, sizeof(uint32_t) * 2);
    warp->bar.arrive_and_wait();
    float d[4];
    for (int i = 0; i < 4; ++i) {
      const int row = lane / 4 + 8 * (i / 2), col = 2 * (lane % 4) + i % 2;
      float acc = 0.f;
      for (int k = 0; k < 16; ++k) acc += a_at(row, k) * b_at(k, col);
      d[i] = c[i] + acc;
    }
    warp->bar.arrive_and_wait();  // every lane has read the operands
    std::memcpy(c, d, sizeof d);
  }
  // ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: lane l gives row l % 8 of matrix l / 8
  // (16-byte aligned, 8 elements); register i of lane l is matrix i's elements (l / 4, 2 (l % 4))
  // and (l / 4, 2 (l % 4) + 1), or with trans (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4); the
  // first in the low half.
  void ldsm_x4(uint32_t (&r)[4], const uint16_t* row) { ldsm(r, row, false); }
  void ldsm_x4_trans(uint32_t (&r)[4], const uint16_t* row) { ldsm(r, row, true); }
  void ldsm(uint32_t (&r)[4], const uint16_t* row, bool trans) {
    if (reinterpret_cast<uintptr_t>(row) % 16 != 0) {
      std::fprintf(stderr, "warp_emulator: ldmatrix row address %p is not 16-byte aligned\n",
                   static_cast<const void*>(row));
      std::abort();
    }
    warp->rows[lane] = row;
    warp->bar.arrive_and_wait();
    auto at = [&](int matrix, int rr, int c) {
      uint16_t x;
      std::memcpy(&x, warp->rows[8 * matrix + rr] + c, sizeof x);
      return uint32_t(x);
    };
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; ++i)
      r[i] = trans ? at(i, 2 * t, g) | at(i, 2 * t + 1, g) << 16
                   : at(i, g, 2 * t) | at(i, g, 2 * t + 1) << 16;
    warp->bar.arrive_and_wait();  // every lane has read the rows
  }
  float shfl_xor(float v, int mask) {
    warp->f[lane] = v;
    warp->bar.arrive_and_wait();
    const float r = warp->f[lane ^ mask];
    warp->bar.arrive_and_wait();
    return r;
  }
  uint32_t pack(float lo, float hi) const {
    return uint32_t(T::from_float(lo)) | uint32_t(T::from_float(hi)) << 16;
  }
  uint16_t to_bits(float x) const { return T::from_float(x); }
  float from_bits(uint16_t b) const { return float(T::from_bits(b)); }
  float exp2(float x) const { return std::exp2(x); }
  float log(float x) const { return std::log(x); }
};

// Runs body(block, tid, smem, warp) for every block of a grid of `threads`-thread blocks, a
// block at a time, each with `smem_bytes` of shared memory filled with 0xff bytes (NaN).
template <typename T, typename Body>
void run_grid(int64_t blocks, int threads, size_t smem_bytes, Body body) {
  struct alignas(64) Line {
    unsigned char bytes[64];
  };
  std::vector<Line> smem((smem_bytes + 63) / 64);
  for (int64_t blk = 0; blk < blocks; ++blk) {
    std::memset(smem.data(), 0xff, smem.size() * sizeof(Line));
    BlockShared shared(threads);
    std::vector<std::thread> pool;
    for (int tid = 0; tid < threads; ++tid)
      pool.emplace_back([&, tid] {
        Warp<T> w{&shared, shared.warps[size_t(tid / 32)].get(), tid % 32};
        body(blk, tid, reinterpret_cast<unsigned char*>(smem.data()), w);
      });
    for (auto& th : pool) th.join();
  }
}

}  // namespace minidl::emu
