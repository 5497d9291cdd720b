// FlashAttention-2-style causal/full attention forward for bf16/f16 on mma.sync (m16n8k16):
// S, P and O live in registers, never in shared memory. Written once over a `Warp` policy so the
// CUDA kernel (flash_attention.cu) and the host emulation of its tiling (tests/warp_emulator.h)
// run the same code. No CUDA headers: only the warp collectives come from the policy.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "tensor/attention_layout.h"

#if defined(__CUDACC__)
#define MINIDL_FLASH_FN __device__ __forceinline__
#define MINIDL_UNROLL _Pragma("unroll")
#else
#define MINIDL_FLASH_FN inline
#define MINIDL_UNROLL
#endif

namespace minidl::flash {

inline constexpr int kWarps = 4;
inline constexpr int kThreads = kWarps * 32;
inline constexpr int kRows = kWarps * 16;  // query rows per block, 16 per warp

// Keys per tile: 64 at head dim 64; 32 at 128 (keeps the prefetch registers at 32 a thread).
template <int HD>
inline constexpr int kKeys = HD <= 64 ? 64 : 32;
// Shared-memory row pitches in 16-bit elements: 8 extra elements put the 8 rows a fragment load
// reads in 8 different 4-bank groups (no conflicts) and keep rows 16-byte aligned.
template <int HD>
inline constexpr int kPitch = HD + 8;  // Q and K rows
template <int HD>
inline constexpr int kPitchVt = kKeys<HD> + 8;  // rows of V transposed ([HD][keys])

// Q [64][HD+8], K [keys][HD+8], V^T [HD][keys+8], all 16-bit.
template <int HD>
constexpr size_t forward_smem_bytes() {
  return size_t(2) *
         (size_t(kRows) * kPitch<HD> + size_t(kKeys<HD>) * kPitch<HD> + size_t(HD) * kPitchVt<HD>);
}

// q:[BH,L,HD] k, v:[BH,S,HD] head views (16-byte aligned rows), out likewise [BH,L,HD] (any
// alignment), lse:[BH,L] f32 (natural log; +inf for a row without keys). Causal is top-left
// aligned: key j takes part for query i when j <= i.
struct ForwardArgs {
  int64_t BH = 0, L = 0, S = 0;
  HeadLayout lq, lk, lv, lo;
  float scale_log2 = 0;  // softmax scale * log2(e): the kernel works in powers of 2
  bool causal = false;
};

// A 16-byte chunk (8 elements) moved with one vector load / store. The host (emulation) copies
// bytes: 16-bit data read as wider words would break C++'s aliasing rules there.
struct alignas(16) Chunk {
  uint32_t w[4];
  MINIDL_FLASH_FN uint16_t element(int e) const { return uint16_t(w[e / 2] >> (16 * (e % 2))); }
};

MINIDL_FLASH_FN Chunk load_chunk(const uint16_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const Chunk*>(p);
#else
  Chunk c;
  std::memcpy(&c, p, sizeof c);
  return c;
#endif
}
MINIDL_FLASH_FN void store_chunk(uint16_t* p, const Chunk& c) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<Chunk*>(p) = c;
#else
  std::memcpy(p, &c, sizeof c);
#endif
}
// Two adjacent 16-bit elements as one word (the lower address in the low half).
MINIDL_FLASH_FN uint32_t ld32(const uint16_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint32_t*>(p);
#else
  uint32_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
#endif
}

// B fragments by ldmatrix x4 from a row-major 16-bit tile (row pitch `pitch` elements). The lane
// addresses: lane l names row l % 8 of 8x8 matrix l / 8.
//   ldsm_b_rows: the tile's rows are B's n (B = tile^T): rows n0.., columns k0.. — b[0..1] the
//   fragment of k-step k0, b[2..3] of k-step k0 + 16.
//   ldsm_b_cols: the tile's rows are B's k (read transposed): rows k0.. k0 + 15, columns n0.. —
//   b[0..1] the fragment of n-tile n0, b[2..3] of n-tile n0 + 8.
template <typename Warp>
MINIDL_FLASH_FN void ldsm_b_rows(uint32_t (&b)[4], const uint16_t* tile, int pitch, int n0, int k0,
                                 int lane, Warp& w) {
  w.ldsm_x4(b, tile + (n0 + lane % 8) * pitch + k0 + 8 * (lane / 8));
}
template <typename Warp>
MINIDL_FLASH_FN void ldsm_b_cols(uint32_t (&b)[4], const uint16_t* tile, int pitch, int k0, int n0,
                                 int lane, Warp& w) {
  w.ldsm_x4_trans(b, tile + (k0 + 8 * ((lane / 8) % 2) + lane % 8) * pitch + n0 + 8 * (lane / 16));
}

// Blocks of one launch: causal blocks with more key tiles (later query tiles) come first.
MINIDL_FLASH_FN void block_coords(const ForwardArgs& a, int64_t block, int64_t& bh, int64_t& i0) {
  const int64_t nqt = (a.L + kRows - 1) / kRows;
  bh = block % a.BH;
  i0 = (nqt - 1 - block / a.BH) * kRows;
}

// One block of the forward: 64 query rows i0.. of batch-head bh, 16 per warp. Per key tile:
// S = Q K^T (fragments: Q in registers, K from shared memory), the online softmax of each row
// in f32 (a row's 16 values per tile live in one quad of lanes), P rounded to T and reused in
// registers as the A operand of O += P V. The next tile's K and V are loaded into registers while
// this one computes. B fragments: Ldm reads them with ldmatrix (x4: four 8x8 matrices per
// instruction, V stored as rows and read transposed); else 32-bit shared loads, V transposed in
// shared memory by 16-bit stores (MINIDL_UNFUSED=flash_ldmatrix).
//   Warp: sync_block(), mma(float c[4], const uint32_t a[4], const uint32_t b[2]) (T operands,
//   f32 accumulate), shfl_xor(float, int), pack(float lo, float hi) -> two T in a word,
//   to_bits(float) -> T's bits, exp2(float), log(float), ldsm_x4 / ldsm_x4_trans(uint32_t r[4],
//   const uint16_t* row) (ldmatrix.m8n8.x4.b16: lane l names row l % 8 of matrix l / 8).
template <int HD, bool Ldm = false, typename Warp>
MINIDL_FLASH_FN void forward_block(const ForwardArgs& a, const uint16_t* __restrict__ q,
                                   const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,
                                   uint16_t* __restrict__ out, float* __restrict__ lse,
                                   int64_t block, int tid, unsigned char* smem, Warp& w) {
  constexpr int Bc = kKeys<HD>, P = kPitch<HD>, PV = kPitchVt<HD>;
  constexpr int kChunksRow = HD / 8;                        // 16-byte chunks per row
  constexpr int kKvChunks = Bc * kChunksRow / kThreads;     // per thread and tile, K and V each
  constexpr int kNt = Bc / 8, kKk = HD / 16, kOt = HD / 8;  // S n-tiles, Q k-steps, O n-tiles
  static_assert(kKk % 2 == 0 && kOt % 2 == 0, "ldmatrix x4 loads two k-steps / two n-tiles");
  static_assert(Bc * kChunksRow % kThreads == 0 && kRows * kChunksRow % kThreads == 0);
  uint16_t* Qs = reinterpret_cast<uint16_t*>(smem);  // [64][P]
  uint16_t* Ks = Qs + kRows * P;                     // [Bc][P]
  uint16_t* Vt = Ks + Bc * P;                        // [HD][PV]; Ldm: V rows [Bc][P]
  static_assert(Bc * P <= HD * PV, "V's rows fit where V^T is kept");
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  int64_t bh = 0, i0 = 0;
  block_coords(a, block, bh, i0);
  const uint16_t* qb = q + a.lq.offset(bh);
  const uint16_t* kb = k + a.lk.offset(bh);
  const uint16_t* vb = v + a.lv.offset(bh);

  for (int c = tid; c < kRows * kChunksRow; c += kThreads) {  // Q tile, zeros past L
    const int r = c / kChunksRow, c8 = c % kChunksRow;
    const int64_t i = i0 + r;
    Chunk x{};
    if (i < a.L) x = load_chunk(qb + i * a.lq.row_stride + 8 * c8);
    store_chunk(Qs + r * P + 8 * c8, x);
  }
  const int64_t kend = a.causal ? (i0 + kRows < a.S ? i0 + kRows : a.S) : a.S;
  const int ntiles = int((kend + Bc - 1) / Bc);
  Chunk kreg[kKvChunks], vreg[kKvChunks];
  auto fetch = [&](int tile) {  // tile's K and V rows into registers, zeros past S
    MINIDL_UNROLL
    for (int x = 0; x < kKvChunks; ++x) {
      const int c = tid + x * kThreads, r = c / kChunksRow, c8 = c % kChunksRow;
      const int64_t j = int64_t(tile) * Bc + r;
      kreg[x] = Chunk{};
      vreg[x] = Chunk{};
      if (j < a.S) {
        kreg[x] = load_chunk(kb + j * a.lk.row_stride + 8 * c8);
        vreg[x] = load_chunk(vb + j * a.lv.row_stride + 8 * c8);
      }
    }
  };
  if (ntiles > 0) fetch(0);
  w.sync_block();  // Q tile stored

  uint32_t qf[kKk][4];  // this warp's 16 rows of Q as A fragments
  const uint16_t* qw = Qs + (16 * warp + g) * P + 2 * t;
  MINIDL_UNROLL
  for (int kk = 0; kk < kKk; ++kk) {
    qf[kk][0] = ld32(qw + 16 * kk);
    qf[kk][1] = ld32(qw + 8 * P + 16 * kk);
    qf[kk][2] = ld32(qw + 16 * kk + 8);
    qf[kk][3] = ld32(qw + 8 * P + 16 * kk + 8);
  }
  float o[kOt][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g and g + 8, base-2 units
  const int64_t row0 = i0 + 16 * warp + g;                 // this lane's first row

  for (int tile = 0; tile < ntiles; ++tile) {
    const int64_t j0 = int64_t(tile) * Bc;
    w.sync_block();  // the previous tile's K and V^T are no longer read
    MINIDL_UNROLL
    for (int x = 0; x < kKvChunks; ++x) {
      const int c = tid + x * kThreads, r = c / kChunksRow, c8 = c % kChunksRow;
      store_chunk(Ks + r * P + 8 * c8, kreg[x]);
      if constexpr (Ldm) {
        store_chunk(Vt + r * P + 8 * c8, vreg[x]);
      } else {
        MINIDL_UNROLL
        for (int e = 0; e < 8; ++e) Vt[(8 * c8 + e) * PV + r] = vreg[x].element(e);
      }
    }
    w.sync_block();
    if (tile + 1 < ntiles) fetch(tile + 1);  // in flight during this tile's products

    float s[kNt][4];  // S = Q K^T: rows g, g + 8; keys 8 nt + 2 t (+1)
    MINIDL_UNROLL
    for (int nt = 0; nt < kNt; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
      if constexpr (Ldm) {
        MINIDL_UNROLL
        for (int kk = 0; kk < kKk; kk += 2) {
          uint32_t b[4];
          ldsm_b_rows(b, Ks, P, 8 * nt, 16 * kk, lane, w);
          w.mma(s[nt], qf[kk], b);
          w.mma(s[nt], qf[kk + 1], b + 2);
        }
      } else {
        const uint16_t* kr = Ks + (8 * nt + g) * P + 2 * t;
        MINIDL_UNROLL
        for (int kk = 0; kk < kKk; ++kk) {
          const uint32_t b[2] = {ld32(kr + 16 * kk), ld32(kr + 16 * kk + 8)};
          w.mma(s[nt], qf[kk], b);
        }
      }
    }
    // Scale to base 2; mask keys past S and, causally, past the row (only near the edges).
    const bool edge = j0 + Bc > a.S || (a.causal && j0 + Bc - 1 > i0 + 16 * warp);
    float mx[2] = {-INFINITY, -INFINITY};
    MINIDL_UNROLL
    for (int nt = 0; nt < kNt; ++nt) MINIDL_UNROLL
    for (int c = 0; c < 4; ++c) {
      float x = s[nt][c] * a.scale_log2;
      if (edge) {
        const int64_t j = j0 + 8 * nt + 2 * t + (c & 1), i = row0 + 8 * (c >> 1);
        if (j >= a.S || (a.causal && j > i)) x = -INFINITY;
      }
      s[nt][c] = x;
      mx[c >> 1] = mx[c >> 1] > x ? mx[c >> 1] : x;
    }
    float base[2];
    MINIDL_UNROLL
    for (int r = 0; r < 2; ++r) {  // quad max, new running max, rescale of l and O
      float v1 = w.shfl_xor(mx[r], 1);
      mx[r] = mx[r] > v1 ? mx[r] : v1;
      v1 = w.shfl_xor(mx[r], 2);
      mx[r] = mx[r] > v1 ? mx[r] : v1;
      const float mnew = m[r] > mx[r] ? m[r] : mx[r];
      base[r] = mnew == -INFINITY ? 0.f : mnew;  // a row without keys so far: p = 0
      const float alpha = w.exp2(m[r] - base[r]);
      m[r] = mnew;
      l[r] *= alpha;
      MINIDL_UNROLL
      for (int ot = 0; ot < kOt; ++ot) {
        o[ot][2 * r] *= alpha;
        o[ot][2 * r + 1] *= alpha;
      }
    }
    MINIDL_UNROLL
    for (int nt = 0; nt < kNt; ++nt) MINIDL_UNROLL
    for (int c = 0; c < 4; ++c) {
      const float p = w.exp2(s[nt][c] - base[c >> 1]);
      s[nt][c] = p;
      l[c >> 1] += p;  // this lane's part of the row sum (quad-reduced at the end)
    }
    // O += P V: key-step kk's A fragment is S n-tiles 2 kk and 2 kk + 1, rounded to T.
    MINIDL_UNROLL
    for (int kk = 0; kk < Bc / 16; ++kk) {
      const uint32_t pa[4] = {
          w.pack(s[2 * kk][0], s[2 * kk][1]), w.pack(s[2 * kk][2], s[2 * kk][3]),
          w.pack(s[2 * kk + 1][0], s[2 * kk + 1][1]), w.pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      if constexpr (Ldm) {
        MINIDL_UNROLL
        for (int ot = 0; ot < kOt; ot += 2) {
          uint32_t b[4];
          ldsm_b_cols(b, Vt, P, 16 * kk, 8 * ot, lane, w);
          w.mma(o[ot], pa, b);
          w.mma(o[ot + 1], pa, b + 2);
        }
      } else {
        MINIDL_UNROLL
        for (int ot = 0; ot < kOt; ++ot) {
          const uint16_t* vr = Vt + (8 * ot + g) * PV + 16 * kk + 2 * t;
          const uint32_t b[2] = {ld32(vr), ld32(vr + 8)};
          w.mma(o[ot], pa, b);
        }
      }
    }
  }

  MINIDL_UNROLL
  for (int r = 0; r < 2; ++r) {  // O / l and lse; rows past L are not written
    l[r] += w.shfl_xor(l[r], 1);
    l[r] += w.shfl_xor(l[r], 2);
    const int64_t i = row0 + 8 * r;
    if (i >= a.L) continue;
    const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
    uint16_t* orow = out + a.lo.offset(bh) + i * a.lo.row_stride + 2 * t;
    MINIDL_UNROLL
    for (int ot = 0; ot < kOt; ++ot) {
      orow[8 * ot] = w.to_bits(o[ot][2 * r] * inv);
      orow[8 * ot + 1] = w.to_bits(o[ot][2 * r + 1] * inv);
    }
    if (t == 0)
      lse[bh * a.L + i] = l[r] > 0.f ? m[r] * 0.6931471805599453f + w.log(l[r]) : INFINITY;
  }
}

}  // namespace minidl::flash
