// FlashAttention-2-style attention backward for bf16/f16 on mma.sync (m16n8k16), without
// atomics: a dQ pass (a block per 64 query rows, over the key tiles; it also writes
// D = rowsum(dO * O)), then a dK/dV pass (a block per 64 key rows, over the query tiles), both
// recomputing P = exp(S - lse) in registers. Same Warp policy as flash_attention.cuh (plus
// from_bits), so tests/warp_emulator.h runs this code on the host.
#pragma once
#include "tensor/cuda/flash_attention.cuh"

namespace minidl::flash {

inline constexpr int kBwdTile = 32;  // keys per tile (dQ pass), queries per tile (dK/dV pass)
inline constexpr float kLog2e = 1.4426950408889634f;

// The forward's arguments plus the saved out (lo in ForwardArgs), grad_out (lg) and the
// gradients' layouts; lse:[BH,L] and dsum:[BH,L] are contiguous f32.
struct BackwardArgs : ForwardArgs {
  HeadLayout lg, lgq, lgk, lgv;
  float scale = 0;  // softmax scale (dQ and dK carry it)
};

// dQ pass: Q, dO [64][HD+8], K and V [32][HD+8], K^T [HD][32+8]; then lse, D [64] f32.
template <int HD>
constexpr size_t backward_dq_smem_bytes() {
  return size_t(2) * (2 * size_t(kRows) * kPitch<HD> + 2 * size_t(kBwdTile) * kPitch<HD> +
                      size_t(HD) * (kBwdTile + 8)) +
         size_t(4) * 2 * kRows;
}
// dK/dV pass: K, V [64][HD+8], Q, dO [32][HD+8], Q^T, dO^T [HD][32+8]; then lse, D [32] f32.
template <int HD>
constexpr size_t backward_dkv_smem_bytes() {
  return size_t(2) * (2 * size_t(kRows) * kPitch<HD> + 2 * size_t(kBwdTile) * kPitch<HD> +
                      2 * size_t(HD) * (kBwdTile + 8)) +
         size_t(4) * 2 * kBwdTile;
}

namespace detail {

// Rows [r0, r0 + 32) of a head view into registers (chunks of 8), zeros past `rows`; and their
// store to a [32][HD+8] tile and optionally its transpose [HD][32+8].
template <int HD>
struct RowTile {
  static constexpr int kChunksRow = HD / 8, kPer = kBwdTile * kChunksRow / kThreads;
  static_assert(kBwdTile * kChunksRow % kThreads == 0);
  Chunk reg[kPer];
  MINIDL_FLASH_FN void fetch(const uint16_t* base, int64_t stride, int64_t r0, int64_t rows,
                             int tid) {
    MINIDL_UNROLL
    for (int x = 0; x < kPer; ++x) {
      const int c = tid + x * kThreads, r = c / kChunksRow, c8 = c % kChunksRow;
      reg[x] = Chunk{};
      if (r0 + r < rows) reg[x] = load_chunk(base + (r0 + r) * stride + 8 * c8);
    }
  }
  MINIDL_FLASH_FN void store(uint16_t* tile, uint16_t* transposed, int tid) const {
    constexpr int P = kPitch<HD>, PT = kBwdTile + 8;
    MINIDL_UNROLL
    for (int x = 0; x < kPer; ++x) {
      const int c = tid + x * kThreads, r = c / kChunksRow, c8 = c % kChunksRow;
      store_chunk(tile + r * P + 8 * c8, reg[x]);
      if (transposed) {
        MINIDL_UNROLL
        for (int e = 0; e < 8; ++e) transposed[(8 * c8 + e) * PT + r] = reg[x].element(e);
      }
    }
  }
};

// Rows [r0, r0 + 64) of a head view into a [64][HD+8] tile, zeros past `rows`.
template <int HD>
MINIDL_FLASH_FN void load_rows64(uint16_t* tile, const uint16_t* base, int64_t stride, int64_t r0,
                                 int64_t rows, int tid) {
  constexpr int kChunksRow = HD / 8;
  for (int c = tid; c < kRows * kChunksRow; c += kThreads) {
    const int r = c / kChunksRow, c8 = c % kChunksRow;
    Chunk x{};
    if (r0 + r < rows) x = load_chunk(base + (r0 + r) * stride + 8 * c8);
    store_chunk(tile + r * kPitch<HD> + 8 * c8, x);
  }
}

// The A fragments of a warp's 16 rows (16 w ..) of a [64][HD+8] tile.
template <int HD>
MINIDL_FLASH_FN void a_fragments(uint32_t (&f)[HD / 16][4], const uint16_t* tile, int warp,
                                 int lane) {
  constexpr int P = kPitch<HD>;
  const uint16_t* p = tile + (16 * warp + lane / 4) * P + 2 * (lane % 4);
  MINIDL_UNROLL
  for (int kk = 0; kk < HD / 16; ++kk) {
    f[kk][0] = ld32(p + 16 * kk);
    f[kk][1] = ld32(p + 8 * P + 16 * kk);
    f[kk][2] = ld32(p + 16 * kk + 8);
    f[kk][3] = ld32(p + 8 * P + 16 * kk + 8);
  }
}

// acc[32/8][4] = A (16 rows, fragments f) times B^T where B is the [32][HD+8] tile (rows = n).
template <int HD, typename Warp>
MINIDL_FLASH_FN void mma_abt(float (&acc)[kBwdTile / 8][4], const uint32_t (&f)[HD / 16][4],
                             const uint16_t* tile, int lane, Warp& w) {
  MINIDL_UNROLL
  for (int nt = 0; nt < kBwdTile / 8; ++nt) {
    acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
    const uint16_t* r = tile + (8 * nt + lane / 4) * kPitch<HD> + 2 * (lane % 4);
    MINIDL_UNROLL
    for (int kk = 0; kk < HD / 16; ++kk) {
      const uint32_t b[2] = {ld32(r + 16 * kk), ld32(r + 16 * kk + 8)};
      w.mma(acc[nt], f[kk], b);
    }
  }
}

// out[HD/8][4] += X B where X (16 x 32) is given as accumulator-layout values x (rounded to T
// here) and B is [32][HD] stored transposed as bt [HD][32+8].
template <int HD, typename Warp>
MINIDL_FLASH_FN void mma_xb(float (&out)[HD / 8][4], const float (&x)[kBwdTile / 8][4],
                            const uint16_t* bt, int lane, Warp& w) {
  constexpr int PT = kBwdTile + 8;
  MINIDL_UNROLL
  for (int kk = 0; kk < kBwdTile / 16; ++kk) {
    const uint32_t a[4] = {w.pack(x[2 * kk][0], x[2 * kk][1]), w.pack(x[2 * kk][2], x[2 * kk][3]),
                           w.pack(x[2 * kk + 1][0], x[2 * kk + 1][1]),
                           w.pack(x[2 * kk + 1][2], x[2 * kk + 1][3])};
    MINIDL_UNROLL
    for (int ot = 0; ot < HD / 8; ++ot) {
      const uint16_t* r = bt + (8 * ot + lane / 4) * PT + 16 * kk + 2 * (lane % 4);
      const uint32_t b[2] = {ld32(r), ld32(r + 8)};
      w.mma(out[ot], a, b);
    }
  }
}

// mma_abt and mma_xb with their B fragments read by ldmatrix (x4) from the [32][HD+8] row tile
// itself (mma_xb's transposed: no transposed copy of the tile is needed). Ldm of the blocks.
template <int HD, typename Warp>
MINIDL_FLASH_FN void mma_abt_ldm(float (&acc)[kBwdTile / 8][4], const uint32_t (&f)[HD / 16][4],
                                 const uint16_t* tile, int lane, Warp& w) {
  static_assert(HD % 32 == 0, "two k-steps per ldmatrix x4");
  MINIDL_UNROLL
  for (int nt = 0; nt < kBwdTile / 8; ++nt) {
    acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
    MINIDL_UNROLL
    for (int kk = 0; kk < HD / 16; kk += 2) {
      uint32_t b[4];
      ldsm_b_rows(b, tile, kPitch<HD>, 8 * nt, 16 * kk, lane, w);
      w.mma(acc[nt], f[kk], b);
      w.mma(acc[nt], f[kk + 1], b + 2);
    }
  }
}
template <int HD, typename Warp>
MINIDL_FLASH_FN void mma_xb_ldm(float (&out)[HD / 8][4], const float (&x)[kBwdTile / 8][4],
                                const uint16_t* tile, int lane, Warp& w) {
  static_assert(HD % 16 == 0, "two n-tiles per ldmatrix x4");
  MINIDL_UNROLL
  for (int kk = 0; kk < kBwdTile / 16; ++kk) {
    const uint32_t a[4] = {w.pack(x[2 * kk][0], x[2 * kk][1]), w.pack(x[2 * kk][2], x[2 * kk][3]),
                           w.pack(x[2 * kk + 1][0], x[2 * kk + 1][1]),
                           w.pack(x[2 * kk + 1][2], x[2 * kk + 1][3])};
    MINIDL_UNROLL
    for (int ot = 0; ot < HD / 8; ot += 2) {
      uint32_t b[4];
      ldsm_b_cols(b, tile, kPitch<HD>, 16 * kk, 8 * ot, lane, w);
      w.mma(out[ot], a, b);
      w.mma(out[ot + 1], a, b + 2);
    }
  }
}

// Rows 16 w + lane / 4 (+ 8) of a [.., HD] head view from accumulator-layout values times
// `factor`; rows at or past `rows` are not written.
template <int HD, typename Warp>
MINIDL_FLASH_FN void store_rows(uint16_t* base, int64_t stride, int64_t r0, int64_t rows,
                                const float (&acc)[HD / 8][4], float factor, int warp, int lane,
                                Warp& w) {
  MINIDL_UNROLL
  for (int r = 0; r < 2; ++r) {
    const int64_t row = r0 + 16 * warp + lane / 4 + 8 * r;
    if (row >= rows) continue;
    uint16_t* p = base + row * stride + 2 * (lane % 4);
    MINIDL_UNROLL
    for (int ot = 0; ot < HD / 8; ++ot) {
      p[8 * ot] = w.to_bits(acc[ot][2 * r] * factor);
      p[8 * ot + 1] = w.to_bits(acc[ot][2 * r + 1] * factor);
    }
  }
}

}  // namespace detail

// dQ pass, one block: 64 query rows i0.. of batch-head bh (ForwardArgs' block order). Writes
// dQ rows < L and D = rowsum(dO * O) of those rows into dsum. Ldm: B fragments by ldmatrix (no
// K^T tile).
template <int HD, bool Ldm = false, typename Warp>
MINIDL_FLASH_FN void backward_dq_block(
    const BackwardArgs& a, const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
    const uint16_t* __restrict__ v, const uint16_t* __restrict__ o, const uint16_t* __restrict__ g,
    const float* __restrict__ lse, uint16_t* __restrict__ gq, float* __restrict__ dsum,
    int64_t block, int tid, unsigned char* smem, Warp& w) {
  constexpr int Bc = kBwdTile, P = kPitch<HD>, PT = Bc + 8, kNt = Bc / 8;
  uint16_t* Qs = reinterpret_cast<uint16_t*>(smem);    // [64][P]
  uint16_t* dOs = Qs + kRows * P;                      // [64][P]
  uint16_t* Ks = dOs + kRows * P;                      // [Bc][P]
  uint16_t* Vs = Ks + Bc * P;                          // [Bc][P]
  uint16_t* Kt = Vs + Bc * P;                          // [HD][PT]
  float* Ls = reinterpret_cast<float*>(Kt + HD * PT);  // [64] lse * log2(e)
  float* Ds = Ls + kRows;                              // [64]
  const int warp = tid / 32, lane = tid % 32, t = lane % 4;
  int64_t bh = 0, i0 = 0;
  block_coords(a, block, bh, i0);
  const uint16_t* kb = k + a.lk.offset(bh);
  const uint16_t* vb = v + a.lv.offset(bh);
  detail::load_rows64<HD>(Qs, q + a.lq.offset(bh), a.lq.row_stride, i0, a.L, tid);
  detail::load_rows64<HD>(dOs, g + a.lg.offset(bh), a.lg.row_stride, i0, a.L, tid);
  {  // D of row tid / 2: two lanes per row, HD / 2 elements each, from dO and O in global memory
    const int r = tid / 2, half = tid % 2;
    const int64_t i = i0 + r;
    float d = 0.f;
    if (i < a.L) {
      const uint16_t* orow = o + a.lo.offset(bh) + i * a.lo.row_stride + half * (HD / 2);
      const uint16_t* grow = g + a.lg.offset(bh) + i * a.lg.row_stride + half * (HD / 2);
      for (int e = 0; e < HD / 2; ++e) d += w.from_bits(orow[e]) * w.from_bits(grow[e]);
    }
    d += w.shfl_xor(d, 1);
    if (half == 0) {
      Ds[r] = d;
      Ls[r] = i < a.L ? lse[bh * a.L + i] * kLog2e : INFINITY;
      if (i < a.L) dsum[bh * a.L + i] = d;
    }
  }
  const int64_t kend = a.causal ? (i0 + kRows < a.S ? i0 + kRows : a.S) : a.S;
  const int ntiles = int((kend + Bc - 1) / Bc);
  detail::RowTile<HD> kreg, vreg;
  if (ntiles > 0) {
    kreg.fetch(kb, a.lk.row_stride, 0, a.S, tid);
    vreg.fetch(vb, a.lv.row_stride, 0, a.S, tid);
  }
  w.sync_block();  // Q, dO, lse, D stored
  uint32_t qf[HD / 16][4], gf[HD / 16][4];
  detail::a_fragments<HD>(qf, Qs, warp, lane);
  detail::a_fragments<HD>(gf, dOs, warp, lane);
  const int64_t row0 = i0 + 16 * warp + lane / 4;
  const float lrow[2] = {Ls[16 * warp + lane / 4], Ls[16 * warp + lane / 4 + 8]};
  const float drow[2] = {Ds[16 * warp + lane / 4], Ds[16 * warp + lane / 4 + 8]};
  float acc[HD / 8][4] = {};
  for (int tile = 0; tile < ntiles; ++tile) {
    const int64_t j0 = int64_t(tile) * Bc;
    w.sync_block();  // the previous tile is no longer read
    kreg.store(Ks, Ldm ? nullptr : Kt, tid);
    vreg.store(Vs, nullptr, tid);
    w.sync_block();
    if (tile + 1 < ntiles) {
      kreg.fetch(kb, a.lk.row_stride, j0 + Bc, a.S, tid);
      vreg.fetch(vb, a.lv.row_stride, j0 + Bc, a.S, tid);
    }
    float s[kNt][4], dp[kNt][4];
    if constexpr (Ldm) {
      detail::mma_abt_ldm<HD>(s, qf, Ks, lane, w);
      detail::mma_abt_ldm<HD>(dp, gf, Vs, lane, w);
    } else {
      detail::mma_abt<HD>(s, qf, Ks, lane, w);   // S = Q K^T
      detail::mma_abt<HD>(dp, gf, Vs, lane, w);  // dP = dO V^T
    }
    const bool edge = j0 + Bc > a.S || (a.causal && j0 + Bc - 1 > i0 + 16 * warp);
    MINIDL_UNROLL
    for (int nt = 0; nt < kNt; ++nt) MINIDL_UNROLL
    for (int c = 0; c < 4; ++c) {  // s becomes dS = P (dP - D)
      const int64_t j = j0 + 8 * nt + 2 * t + (c & 1), i = row0 + 8 * (c >> 1);
      const bool in = !edge || (j < a.S && !(a.causal && j > i));
      const float p = in ? w.exp2(s[nt][c] * a.scale_log2 - lrow[c >> 1]) : 0.f;
      s[nt][c] = p * (dp[nt][c] - drow[c >> 1]);
    }
    if constexpr (Ldm)
      detail::mma_xb_ldm<HD>(acc, s, Ks, lane, w);
    else
      detail::mma_xb<HD>(acc, s, Kt, lane, w);  // dQ += dS K
  }
  detail::store_rows<HD>(gq + a.lgq.offset(bh), a.lgq.row_stride, i0, a.L, acc, a.scale, warp, lane,
                         w);
}

// dK/dV pass, one block: 64 key rows j0.. of batch-head bh, 16 per warp, over the query tiles
// (causally from the tile holding query j0). Key tiles with more queries come first. Reads D
// from dsum (the dQ pass). Ldm: B fragments by ldmatrix (no Q^T, dO^T tiles).
template <int HD, bool Ldm = false, typename Warp>
MINIDL_FLASH_FN void backward_dkv_block(
    const BackwardArgs& a, const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
    const uint16_t* __restrict__ v, const uint16_t* __restrict__ g, const float* __restrict__ lse,
    const float* __restrict__ dsum, uint16_t* __restrict__ gk, uint16_t* __restrict__ gv,
    int64_t block, int tid, unsigned char* smem, Warp& w) {
  constexpr int Bq = kBwdTile, P = kPitch<HD>, PT = Bq + 8, kNt = Bq / 8;
  uint16_t* Ks = reinterpret_cast<uint16_t*>(smem);     // [64][P]
  uint16_t* Vs = Ks + kRows * P;                        // [64][P]
  uint16_t* Qs = Vs + kRows * P;                        // [Bq][P]
  uint16_t* dOs = Qs + Bq * P;                          // [Bq][P]
  uint16_t* Qt = dOs + Bq * P;                          // [HD][PT]
  uint16_t* dOt = Qt + HD * PT;                         // [HD][PT]
  float* Ls = reinterpret_cast<float*>(dOt + HD * PT);  // [Bq] lse * log2(e)
  float* Ds = Ls + Bq;                                  // [Bq]
  const int warp = tid / 32, lane = tid % 32, t = lane % 4;
  const int64_t bh = block % a.BH, j0 = (block / a.BH) * kRows;
  const uint16_t* qb = q + a.lq.offset(bh);
  const uint16_t* gb = g + a.lg.offset(bh);
  detail::load_rows64<HD>(Ks, k + a.lk.offset(bh), a.lk.row_stride, j0, a.S, tid);
  detail::load_rows64<HD>(Vs, v + a.lv.offset(bh), a.lv.row_stride, j0, a.S, tid);
  const int first = a.causal ? int(j0 / Bq) : 0;
  const int ntiles = int((a.L + Bq - 1) / Bq);
  detail::RowTile<HD> qreg, greg;
  float lreg = INFINITY, dreg = 0.f;  // thread tid < Bq: lse * log2(e) and D of query tid
  auto fetch = [&](int tile) {
    const int64_t r0 = int64_t(tile) * Bq;
    qreg.fetch(qb, a.lq.row_stride, r0, a.L, tid);
    greg.fetch(gb, a.lg.row_stride, r0, a.L, tid);
    if (tid < Bq) {
      const bool in = r0 + tid < a.L;
      lreg = in ? lse[bh * a.L + r0 + tid] * kLog2e : INFINITY;
      dreg = in ? dsum[bh * a.L + r0 + tid] : 0.f;
    }
  };
  if (first < ntiles) fetch(first);
  w.sync_block();  // K, V stored
  uint32_t kf[HD / 16][4], vf[HD / 16][4];
  detail::a_fragments<HD>(kf, Ks, warp, lane);
  detail::a_fragments<HD>(vf, Vs, warp, lane);
  const int64_t key0 = j0 + 16 * warp + lane / 4;  // this lane's first key row
  float dk[HD / 8][4] = {}, dv[HD / 8][4] = {};
  for (int tile = first; tile < ntiles; ++tile) {
    const int64_t i0 = int64_t(tile) * Bq;
    w.sync_block();
    qreg.store(Qs, Ldm ? nullptr : Qt, tid);
    greg.store(dOs, Ldm ? nullptr : dOt, tid);
    if (tid < Bq) Ls[tid] = lreg, Ds[tid] = dreg;
    w.sync_block();
    if (tile + 1 < ntiles) fetch(tile + 1);
    float st[kNt][4], dpt[kNt][4];
    if constexpr (Ldm) {
      detail::mma_abt_ldm<HD>(st, kf, Qs, lane, w);
      detail::mma_abt_ldm<HD>(dpt, vf, dOs, lane, w);
    } else {
      detail::mma_abt<HD>(st, kf, Qs, lane, w);    // S^T = K Q^T
      detail::mma_abt<HD>(dpt, vf, dOs, lane, w);  // dP^T = V dO^T
    }
    const bool edge = i0 + Bq > a.L || j0 + kRows > a.S || (a.causal && j0 + 16 * warp + 15 > i0);
    MINIDL_UNROLL
    for (int nt = 0; nt < kNt; ++nt) MINIDL_UNROLL
    for (int c = 0; c < 4; ++c) {  // st becomes P^T, dpt becomes dS^T = P^T (dP^T - D)
      const int col = 8 * nt + 2 * t + (c & 1);
      const int64_t i = i0 + col, j = key0 + 8 * (c >> 1);
      const bool in = !edge || (i < a.L && j < a.S && !(a.causal && j > i));
      const float p = in ? w.exp2(st[nt][c] * a.scale_log2 - Ls[col]) : 0.f;
      st[nt][c] = p;
      dpt[nt][c] = p * (dpt[nt][c] - Ds[col]);
    }
    if constexpr (Ldm) {
      detail::mma_xb_ldm<HD>(dv, st, dOs, lane, w);
      detail::mma_xb_ldm<HD>(dk, dpt, Qs, lane, w);
    } else {
      detail::mma_xb<HD>(dv, st, dOt, lane, w);  // dV += P^T dO
      detail::mma_xb<HD>(dk, dpt, Qt, lane, w);  // dK += dS^T Q
    }
  }
  detail::store_rows<HD>(gk + a.lgk.offset(bh), a.lgk.row_stride, j0, a.S, dk, a.scale, warp, lane,
                         w);
  detail::store_rows<HD>(gv + a.lgv.offset(bh), a.lgv.row_stride, j0, a.S, dv, 1.f, warp, lane, w);
}

}  // namespace minidl::flash
