// Suite cuda_review_elementwise (its own process in tools/gpu/verify.sh): edge cases of the CUDA
// elementwise, copy, reduction, index, topk and random kernels that the parity tables do not reach
// (pre-silicon review): float->int conversions of NaN/inf/out-of-range values, 64-bit offsets past
// 2^31 elements, the global-memory topk path, the deterministic scatter_add line path,
// embedding_backward runs, misaligned row copies and random fills into misaligned views. Every
// result is compared with the CPU kernel's.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "autograd/ops.h"
#include "tensor/cuda_api.h"
#include "test_util.h"

using namespace minidl;
using testutil::bitwise_equal;
using testutil::check_close;
using testutil::random_tensor;

namespace {

const Device kGpu{DeviceType::cuda, 0};

}  // namespace

TEST_SUITE("cuda_review_elementwise") {
  TEST_CASE(
      "cuda review: float to integer casts of NaN, inf and out-of-range values match the cpu") {
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = INFINITY;
    const std::vector<double> v = {nan,  inf,   -inf,   3e9,    -3e9,          1e19, -1e19,
                                   -0.7, -1.5,  255.9,  256.5,  300.2,         -0.0, 65504,
                                   1e5,  -1e5,  2.5e9,  -2.5e9, 2147483520.0,  9e18, -9.3e18,
                                   1.0,  127.9, -128.9, 70000,  -2147483648.0, 4e9,  0.49};
    for (DType src : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
      const Tensor xc = testutil::from_f64(v, {int64_t(v.size())}, src);
      const Tensor xg = xc.to(kGpu);
      for (DType dst : {kInt32, kInt64, kUInt8, kBool, kFloat16, kBFloat16, kFloat32}) {
        INFO(src, " -> ", dst);
        // floats by value (a NaN's payload may differ on the device), integers bit for bit;
        // also from a strided view
        const Tensor vg[] = {xg, xg.slice(0, 0, xg.size(0), 3)};
        const Tensor vc[] = {xc, xc.slice(0, 0, xc.size(0), 3)};
        for (int k = 0; k < 2; ++k) {
          if (is_floating(dst))
            check_close(vg[k].to(dst).cpu(), vc[k].to(dst), 0, 0);
          else
            CHECK(bitwise_equal(vg[k].to(dst), vc[k].to(dst)));
        }
      }
    }
    // integer narrowing wraps; large int64 -> float rounds once
    const std::vector<double> iv = {
        -1, 255, 256, -129, 4294967296.0 + 7, -2147483649.0, 9007199254740993.0, 70000};
    const Tensor ic = testutil::from_f64(iv, {int64_t(iv.size())}, kInt64);
    for (DType dst : {kInt32, kUInt8, kBool, kFloat16, kBFloat16, kFloat32, kFloat64}) {
      INFO("int64 -> ", dst);
      CHECK(bitwise_equal(ic.to(kGpu).to(dst), ic.to(dst)));  // no NaN here: bitwise
    }
  }

  TEST_CASE("cuda review: elementwise ops and reductions past 2^31 elements use 64-bit offsets") {
    // big:[m, 2] u8 and its transpose [2, m] (not coalescible): the strided kernel's int64 path.
    const int64_t m = (int64_t(1) << 30) + 2051, numel = 2 * m;
    Tensor big = empty({m, 2}, kUInt8, kGpu);
    Tensor t = big.transpose(0, 1);
    t.fill_(3);                                       // strided fill over 2^31 + 4102 elements
    big.narrow(0, m - 1, 1).fill_(7);                 // the last row
    big.narrow(0, 1000, 1).narrow(1, 1, 1).fill_(9);  // an early element, for argmax ties
    CHECK(sum(big).item<int64_t>() == 3 * (numel - 3) + 14 + 9);
    CHECK(sum(t, {1}).cpu().tolist<int64_t>() ==
          std::vector<int64_t>{3 * (m - 1) + 7, 3 * (m - 2) + 7 + 9});
    CHECK(amax(big).item<int64_t>() == 9);
    {
      auto [val, idx] = max(big.view({-1}), 0);
      CHECK(val.item<int64_t>() == 9);
      CHECK(idx.item<int64_t>() == 2001);
      auto [vmin, imin] = min(big.view({-1}), 0);
      CHECK(vmin.item<int64_t>() == 3);
      CHECK(imin.item<int64_t>() == 0);
      big.narrow(0, 1000, 1).narrow(1, 1, 1).fill_(3);
      auto [v7, i7] = max(big.view({-1}), 0);
      CHECK(v7.item<int64_t>() == 7);
      CHECK(i7.item<int64_t>() == numel - 2);
    }
    {
      Tensor s = add(t, t);  // strided inputs, contiguous [2, m] output (int64 offsets)
      REQUIRE(s.is_contiguous());
      CHECK(s.narrow(1, m - 3, 3).cpu().tolist<int64_t>() ==
            std::vector<int64_t>{6, 6, 14, 6, 6, 14});
      CHECK(sum(s).item<int64_t>() == 6 * (numel - 2) + 28);
    }
    {
      Tensor s = add(big, big);  // contiguous: the vectorised kernel past 2^31
      CHECK(s.narrow(0, m - 2, 2).cpu().tolist<int64_t>() == std::vector<int64_t>{6, 6, 14, 14});
      CHECK(sum(s).item<int64_t>() == 6 * (numel - 2) + 28);
    }
  }

  TEST_CASE("cuda review: topk on rows longer than 2048 (global bitonic path) matches the cpu") {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8}) {
      // integer-valued data in [0, 40): many ties; a few NaNs and -0.0 for floats
      Tensor xc = random_tensor({3, 5000}, kInt64, 11, 0, 40).to(kFloat64);
      if (is_floating(dt)) {
        std::vector<double> v = xc.tolist<double>();
        v[17] = nan;
        v[4999] = nan;
        v[5000 + 3] = -0.0;
        v[5000 + 9] = 0.0;
        v[10000 + 4321] = nan;
        xc = testutil::from_f64(v, {3, 5000}, kFloat64);
      }
      xc = xc.to(dt);
      const Tensor xg = xc.to(kGpu);
      for (bool largest : {true, false}) {
        for (int64_t k : {int64_t(1), int64_t(7), int64_t(5000)}) {
          INFO(dt, " largest ", largest, " k ", k);
          auto [vg, ig] = topk(xg, k, 1, largest, true);
          auto [vc, ic] = topk(xc, k, 1, largest, true);
          CHECK(bitwise_equal(vg, vc));
          CHECK(ig.cpu().tolist<int64_t>() == ic.tolist<int64_t>());
        }
        // along dim 0 of the transpose (strided rows)
        auto [vg, ig] = topk(xg.transpose(0, 1), 5, 0, largest, true);
        auto [vc, ic] = topk(xc.transpose(0, 1), 5, 0, largest, true);
        CHECK(bitwise_equal(vg, vc));
        CHECK(ig.cpu().tolist<int64_t>() == ic.tolist<int64_t>());
      }
    }
  }

  TEST_CASE("cuda review: scatter_add line and atomic paths, embedding_backward runs") {
    const int64_t sms = cuda::get_device_properties(0).multi_processor_count;
    // lines >= 2 * sms * 256: one thread per line, index order (= the CPU's order, exact)
    const int64_t rows = 2 * sms * 256 + 5;
    for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32, kUInt8, kBool}) {
      INFO(dt);
      const Tensor x = random_tensor({rows, 4}, dt, 21);
      const Tensor ix = random_tensor({rows, 9}, kInt64, 22, 0, 4);
      const Tensor src = random_tensor({rows, 9}, dt, 23);
      CHECK(bitwise_equal(scatter_add(x.to(kGpu), 1, ix.to(kGpu), src.to(kGpu)),
                          scatter_add(x, 1, ix, src)));
    }
    // few long lines: atomics (integers stay exact, floats within rounding)
    for (DType dt : {kInt64, kInt32, kFloat32, kFloat64, kFloat16}) {
      INFO(dt);
      const Tensor x = random_tensor({3, 50}, dt, 24);
      const Tensor ix = random_tensor({3, 2000}, kInt64, 25, 0, 50);
      const Tensor src = random_tensor({3, 2000}, dt, 26);
      const Tensor got = scatter_add(x.to(kGpu), 1, ix.to(kGpu), src.to(kGpu));
      const Tensor want = scatter_add(x, 1, ix, src);
      // atomics add in another order: absolute bounds on ~40 rounded adds of values in [-2, 2)
      const double atol = dt == kFloat16 ? 0.5 : dt == kFloat32 ? 1e-4 : 1e-10;
      if (is_floating(dt))
        check_close(got.cpu(), want, 0, atol);
      else
        CHECK(bitwise_equal(got, want));
      // along dim 0 of a transposed self (strided output)
      const Tensor xt = random_tensor({50, 3}, dt, 27);
      const Tensor ixt = random_tensor({2000, 3}, kInt64, 28, 0, 50);
      const Tensor st = random_tensor({2000, 3}, dt, 29);
      const Tensor gt = scatter_add(xt.to(kGpu), 0, ixt.to(kGpu), st.to(kGpu));
      const Tensor wt = scatter_add(xt, 0, ixt, st);
      if (is_floating(dt))
        check_close(gt.cpu(), wt, 0, atol);
      else
        CHECK(bitwise_equal(gt, wt));
    }
    // embedding_backward: long runs of equal indices summed in position order (exact)
    for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
      INFO(dt);
      const Tensor ix = random_tensor({4000}, kInt64, 30, 0, 50);
      const Tensor g = random_tensor({4000, 33}, dt, 31);
      for (int64_t pad : {int64_t(-1), int64_t(3)}) {
        CHECK(bitwise_equal(embedding_backward(g.to(kGpu), ix.to(kGpu), 50, pad),
                            embedding_backward(g, ix, 50, pad)));
        // strided grad_out and indices of another shape
        const Tensor g2 = random_tensor({33, 4000}, dt, 32).transpose(0, 1);
        CHECK(bitwise_equal(embedding_backward(g2.to(kGpu), ix.to(kGpu), 70000, pad),
                            embedding_backward(g2, ix, 70000, pad)));
      }
    }
  }

  TEST_CASE("cuda review: index_select and embedding on misaligned, strided and offset views") {
    // view 0: contiguous rows; 1: narrow(0, 1, 50), contiguous but misaligned (narrow word
    // copies); 2: same values, non-contiguous (the restrided gather path)
    auto make_view = [](const Tensor& b, int which) {
      if (which == 1) return b.narrow(0, 1, 50);
      if (which == 2) return b.transpose(0, 1).contiguous().transpose(0, 1);
      return b;
    };
    for (DType dt : {kUInt8, kFloat16, kFloat32, kFloat64, kInt64, kBool}) {
      for (int64_t cols : {int64_t(7), int64_t(8), int64_t(1), int64_t(16)}) {
        const Tensor base = random_tensor({51, cols}, dt, 40);
        const Tensor basg = base.to(kGpu);
        const Tensor ix = random_tensor({40}, kInt64, 41, 0, 50).slice(0, 0, 40, 2);  // stride 2
        const Tensor icol = random_tensor({5}, kInt64, 43, 0, double(cols));
        for (int which = 0; which < 3; ++which) {
          INFO(dt, " cols ", cols, " view ", which);
          const Tensor xc = make_view(base, which), xg = make_view(basg, which);
          CHECK(bitwise_equal(index_select(xg, 0, ix.to(kGpu)), index_select(xc, 0, ix)));
          CHECK(bitwise_equal(index_select(xg, 1, icol.to(kGpu)), index_select(xc, 1, icol)));
          if (is_floating(dt))
            CHECK(bitwise_equal(embedding(xg, ix.reshape({4, 5}).to(kGpu)),
                                embedding(xc, ix.reshape({4, 5}))));
        }
      }
    }
  }

  TEST_CASE("cuda review: random fills into misaligned contiguous views match the cpu") {
    for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
      for (int64_t n : {int64_t(1), int64_t(3), int64_t(5), int64_t(1001)}) {
        INFO(dt, " n ", n);
        Tensor bc = zeros({n + 3}, dt), bg = zeros({n + 3}, dt, kGpu);
        Tensor vc = bc.narrow(0, 1, n), vg = bg.narrow(0, 1, n);  // contiguous, misaligned
        Generator gc(5), gg(5);
        uniform_(vc, -1, 3, &gc);
        uniform_(vg, -1, 3, &gg);
        CHECK(bitwise_equal(bg, bc));  // the padding elements stay 0
        CHECK(gc.offset() == gg.offset());
        normal_(vc, 0.5, 2, &gc);
        normal_(vg, 0.5, 2, &gg);
        check_close(bg.cpu(), bc);  // Box-Muller: device log/cos may differ in the last bit
        Tensor mc = bernoulli({n}, 0.3, dt, kCPU, &gc), mg = bernoulli({n}, 0.3, dt, kGpu, &gg);
        CHECK(bitwise_equal(mg, mc));
        CHECK(gc.offset() == gg.offset());
      }
    }
  }

  TEST_CASE("cuda review: max/min(dim) and amax keep the first extreme across split chunks") {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    // rows: 300001 equal values (first index wins), NaNs late in a long row (first NaN wins)
    std::vector<double> v(size_t(2 * 300001), 1.0);
    v[300001 + 123457] = nan;
    v[300001 + 250000] = nan;
    v[300001 + 7] = 5;
    for (DType dt : {kFloat32, kFloat16, kFloat64}) {
      INFO(dt);
      const Tensor xc = testutil::from_f64(v, {2, 300001}, dt);
      const Tensor xg = xc.to(kGpu);
      for (bool is_max : {true, false}) {
        auto [vg, ig] = is_max ? max(xg, 1) : min(xg, 1);
        auto [vc, ic] = is_max ? max(xc, 1) : min(xc, 1);
        CHECK(ig.cpu().tolist<int64_t>() == std::vector<int64_t>{0, 123457});
        CHECK(ic.tolist<int64_t>() == std::vector<int64_t>{0, 123457});
        CHECK(bitwise_equal(vg, vc));
      }
      // the column kernel with K split across blocks: [K, 16] reduced over dim 0
      std::vector<double> c(size_t(200003 * 16), 2.0);
      c[size_t(150000 * 16 + 3)] = nan;
      c[size_t(100000 * 16 + 3)] = nan;
      c[size_t(170000 * 16 + 5)] = 9;
      c[size_t(190000 * 16 + 5)] = 9;
      c[size_t(199999 * 16 + 6)] = -4;
      const Tensor cc = testutil::from_f64(c, {200003, 16}, dt);
      const Tensor cg = cc.to(kGpu);
      for (bool is_max : {true, false}) {
        auto [vg, ig] = is_max ? max(cg, 0) : min(cg, 0);
        auto [vc, ic] = is_max ? max(cc, 0) : min(cc, 0);
        CHECK(ig.cpu().tolist<int64_t>() == ic.tolist<int64_t>());
        CHECK(bitwise_equal(vg, vc));
      }
      CHECK(bitwise_equal(amax(cg, {0}), amax(cc, {0})));
      CHECK(bitwise_equal(amin(cg, {0}), amin(cc, {0})));
    }
  }
}
