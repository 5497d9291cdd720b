// Linear algebra tests: matmul (1-D, batched, broadcast), mm, bmm, linear and the raw
// cpu::gemm entry, against naive f64 triple loops; layouts, zero sizes, dtypes, errors.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "tensor/cpu/gemm.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {

struct Ref {
  Shape shape;
  std::vector<double> v;
};

// torch.matmul semantics in f64 with naive loops (broadcast through expand + tolist).
Ref ref_matmul(const Tensor& a, const Tensor& b) {
  Tensor a3 = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor b3 = b.dim() == 1 ? b.unsqueeze(1) : b;
  const int64_t M = a3.size(-2), K = a3.size(-1), N = b3.size(-1);
  REQUIRE(b3.size(-2) == K);
  Shape ba(a3.shape().begin(), a3.shape().end() - 2), bb(b3.shape().begin(), b3.shape().end() - 2);
  Shape batch = broadcast_shapes(ba, bb, "ref");
  Shape ea = batch, eb = batch;
  ea.insert(ea.end(), {M, K});
  eb.insert(eb.end(), {K, N});
  std::vector<double> av = to_f64(a3.expand(ea)), bv = to_f64(b3.expand(eb));
  const int64_t B = shape_numel(batch);
  Ref r;
  r.v.assign(size_t(B * M * N), 0.0);
  for (int64_t z = 0; z < B; ++z)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += av[(z * M + i) * K + k] * bv[(z * K + k) * N + j];
        r.v[size_t((z * M + i) * N + j)] = s;
      }
  r.shape = batch;
  if (a.dim() != 1) r.shape.push_back(M);
  if (b.dim() != 1) r.shape.push_back(N);
  return r;
}

void check_matmul(const Tensor& a, const Tensor& b, double rtol = -1, double atol = -1) {
  Ref r = ref_matmul(a, b);
  Tensor out = matmul(a, b);
  INFO("a ", a.shape_str(), " b ", b.shape_str());
  CHECK(out.dtype() == a.dtype());
  REQUIRE(out.shape() == r.shape);
  check_close(out, r.v, rtol, atol);
}

}  // namespace

TEST_CASE("matmul hand-worked values") {
  Tensor a = from_f64({1, 2, 3, 4}, {2, 2}), b = from_f64({5, 6, 7, 8}, {2, 2});
  check_close(matmul(a, b), {19, 22, 43, 50}, 0, 0);
  check_close(mm(a, b), {19, 22, 43, 50}, 0, 0);
  Tensor v = from_f64({1, 2, 3}, {3}), w = from_f64({4, 5, 6}, {3});
  Tensor d = matmul(v, w);
  CHECK(d.dim() == 0);
  CHECK(d.item<double>() == 32.0);
  Tensor m = from_f64({1, 0, 2, -1, 3, 1}, {2, 3});
  check_close(matmul(m, v), {7, 8}, 0, 0);                           // mv
  check_close(matmul(from_f64({1, -1}, {2}), m), {2, -3, 1}, 0, 0);  // vm
  Tensor ba = from_f64({1, 2, 3, 4, 0, 1, 1, 0}, {2, 2, 2});
  Tensor bb = from_f64({1, 0, 0, 1, 2, 3, 4, 5}, {2, 2, 2});
  check_close(bmm(ba, bb), {1, 2, 3, 4, 4, 5, 2, 3}, 0, 0);
}

TEST_CASE("matmul shapes: 1-D, 2-D, batched and broadcast batch dims") {
  uint64_t seed = 1;
  auto R = [&](const Shape& s) { return random_tensor(s, kFloat32, seed++); };
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{5}, {5}},
      {{3, 5}, {5}},
      {{5}, {5, 4}},
      {{3, 5}, {5, 4}},
      {{2, 3, 5}, {5}},
      {{5}, {2, 5, 4}},
      {{2, 3, 5}, {5, 4}},
      {{3, 5}, {2, 5, 4}},
      {{2, 3, 5}, {2, 5, 4}},
      {{2, 1, 3, 4}, {5, 4, 6}},
      {{2, 1, 3, 4}, {1, 5, 4, 6}},
      {{1, 3, 4}, {7, 4, 2}},
      {{2, 2, 3, 5}, {5}},
      {{5}, {3, 1, 5, 2}},
      {{4, 1, 2, 3}, {3, 2}},
  };
  for (const auto& [sa, sb] : cases) check_matmul(R(sa), R(sb));
  CHECK(matmul(R({2, 1, 3, 4}), R({5, 4, 6})).shape() == Shape{2, 5, 3, 6});
  CHECK(matmul(R({2, 3, 5}), R({5})).shape() == Shape{2, 3});
  CHECK(matmul(R({5}), R({2, 5, 4})).shape() == Shape{2, 4});
}

TEST_CASE("matmul with transposed, strided, expanded and sliced operands") {
  Tensor a = random_tensor({6, 5}, kFloat32, 11), b = random_tensor({5, 7}, kFloat32, 12);
  Tensor at = random_tensor({5, 6}, kFloat32, 13).t(), bt = random_tensor({7, 5}, kFloat32, 14).t();
  CHECK(!at.is_contiguous());
  check_matmul(at, b);
  check_matmul(a, bt);
  check_matmul(at, bt);
  check_matmul(noncontiguous(a), noncontiguous(b));  // inner stride 2: copied
  check_matmul(noncontiguous(b).t(), noncontiguous(a).t());
  // sliced rows: row stride larger than the number of columns (no copy path)
  Tensor wide = random_tensor({6, 9}, kFloat32, 15);
  check_matmul(wide.narrow(1, 2, 5), b);
  check_matmul(a, wide.narrow(0, 0, 5).narrow(1, 1, 7));
  // batched: permuted batch dims, transposed matrices, broadcast (stride 0) batch
  Tensor x = random_tensor({4, 3, 6, 5}, kFloat32, 16).permute({1, 0, 2, 3});  // [3,4,6,5]
  Tensor y = random_tensor({3, 4, 7, 5}, kFloat32, 17).transpose(-1, -2);      // [3,4,5,7]
  check_matmul(x, y);
  Tensor y1 = random_tensor({1, 5, 7}, kFloat32, 18).expand({3, 5, 7});
  Tensor x3 = random_tensor({3, 6, 5}, kFloat32, 19);
  check_close(bmm(x3, y1), ref_matmul(x3, y1).v);
  check_close(bmm(x3.transpose(1, 2).contiguous().transpose(1, 2), y1), ref_matmul(x3, y1).v);
  // a row vector broadcast down the rows (row stride 0) is copied, not misread
  Tensor rowb = random_tensor({1, 5}, kFloat32, 20).expand({6, 5});
  check_matmul(rowb, b);
  // inputs are left untouched
  std::vector<double> before = to_f64(at);
  (void)matmul(at, bt);
  CHECK(to_f64(at) == before);
}

TEST_CASE("bmm kernel writes into a non-contiguous output") {
  Tensor a = random_tensor({2, 3, 4}, kFloat32, 21), b = random_tensor({2, 4, 5}, kFloat32, 22);
  for (DType dt : {kFloat32, kInt64}) {
    Tensor ad = a.to(dt), bd = b.to(dt);
    Tensor buf = zeros({2, 5, 3}, dt);
    Tensor out = buf.transpose(1, 2);  // [2,3,5], not contiguous
    kernel<Op::bmm>(kCPU)(ad, bd, out);
    check_close(buf.transpose(1, 2), ref_matmul(ad, bd).v);
  }
}

TEST_CASE("matmul zero-size dims") {
  Tensor a = random_tensor({3, 0}, kFloat32, 1), b = random_tensor({0, 4}, kFloat32, 2);
  Tensor r = matmul(a, b);  // K = 0: zeros
  CHECK(r.shape() == Shape{3, 4});
  check_close(r, std::vector<double>(12, 0.0), 0, 0);
  Tensor d = matmul(empty({0}), empty({0}));
  CHECK(d.dim() == 0);
  CHECK(d.item<double>() == 0.0);
  CHECK(matmul(empty({0, 5}), random_tensor({5, 4})).shape() == Shape{0, 4});
  CHECK(matmul(random_tensor({3, 5}), empty({5, 0})).shape() == Shape{3, 0});
  CHECK(bmm(empty({0, 2, 3}), empty({0, 3, 4})).shape() == Shape{0, 2, 4});
  Tensor z = bmm(random_tensor({2, 3, 0}, kFloat64), random_tensor({2, 0, 2}, kFloat64));
  check_close(z, std::vector<double>(12, 0.0), 0, 0);
  Tensor zi = matmul(empty({2, 0}, kInt64), empty({0, 3}, kInt64));
  check_close(zi, std::vector<double>(6, 0.0), 0, 0);
  CHECK(matmul(empty({2, 0, 3, 4}), random_tensor({4, 2})).shape() == Shape{2, 0, 3, 2});
  CHECK(matmul(empty({0, 3, 4}), random_tensor({2, 1, 4, 2})).shape() == Shape{2, 0, 3, 2});
}

TEST_CASE("matmul every float dtype and integers against f64 loops") {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{7}, {7}}, {{4, 7}, {7, 5}}, {{3, 4, 7}, {3, 7, 5}}, {{2, 1, 4, 7}, {3, 7, 5}}};
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8}) {
    const bool u8 = dt == kUInt8;
    for (size_t c = 0; c < cases.size(); ++c) {
      INFO("dtype ", dtype_name(dt), " case ", c);
      Tensor a = random_tensor(cases[c].first, dt, 100 + c, u8 ? 0 : -5, u8 ? 4 : 5);
      Tensor b = random_tensor(cases[c].second, dt, 200 + c, u8 ? 0 : -5, u8 ? 4 : 5);
      check_matmul(a, b);
      check_matmul(a.dim() >= 2 ? a.transpose(-1, -2).contiguous().transpose(-1, -2) : a,
                   b.dim() >= 2 ? noncontiguous(b) : b);
    }
  }
  // integer products are exact and wrap like PyTorch (uint8: mod 256)
  Tensor big = full({1, 2}, 3000000000LL, kInt64), one = full({2, 1}, 3, kInt64);
  CHECK(matmul(big, one).item<int64_t>() == 18000000000LL);
  Tensor u = full({1, 3}, 100, kUInt8), v = full({3, 1}, 2, kUInt8);
  CHECK(matmul(u, v).item<int64_t>() == (600 % 256));
}

TEST_CASE("gemm sizes that exercise Eigen blocking, threads and batch parallelism") {
  // one large-ish GEMM (blocked, multithreaded), f64 tight tolerance
  Tensor a = random_tensor({130, 257}, kFloat64, 31), b = random_tensor({257, 190}, kFloat64, 32);
  check_matmul(a, b);
  check_matmul(a.t().contiguous().t(), b.t().contiguous().t());
  // f32 on the same shape: error grows ~sqrt(K) * eps * |terms|
  check_matmul(a.to(kFloat32), b.to(kFloat32), 1e-4, 1e-4);
  // M > N: the threaded path splits rows; transposed A and B views
  check_matmul(random_tensor({100, 300}, kFloat64, 39).t(),
               random_tensor({40, 100}, kFloat64, 40).t());
  // many small matrices: parallel across the batch
  check_matmul(random_tensor({300, 8, 9}, kFloat32, 33), random_tensor({300, 9, 10}, kFloat32, 34));
  // a few big ones: serial loop, Eigen threads inside
  check_matmul(
      random_tensor({2, 160, 170}, kFloat64, 35),
      random_tensor({2, 170, 180}, kFloat64, 36).transpose(1, 2).contiguous().transpose(1, 2));
  // f16 / bf16 through the f32 path on a long contraction (rounded once)
  for (DType dt : {kFloat16, kBFloat16})
    check_matmul(random_tensor({33, 300}, dt, 37), random_tensor({300, 17}, dt, 38));
}

TEST_CASE("cpu::gemm_f32 / gemm_f64 transposes, leading dims, alpha and beta") {
  const int64_t M = 5, N = 4, K = 3;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      INFO("trans_a ", ta, " trans_b ", tb);
      // padded leading dims (ld = width + 2)
      const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
      const int64_t lda = ac + 2, ldb = bc + 2, ldc = N + 1;
      std::vector<double> A(size_t(ar * lda)), B(size_t(br * ldb)), C(size_t(M * ldc));
      for (size_t i = 0; i < A.size(); ++i) A[i] = double(int(i * 7 % 11) - 5);
      for (size_t i = 0; i < B.size(); ++i) B[i] = double(int(i * 5 % 13) - 6);
      for (size_t i = 0; i < C.size(); ++i) C[i] = double(i % 3);
      auto a_at = [&](int64_t i, int64_t k) { return ta ? A[k * lda + i] : A[i * lda + k]; };
      auto b_at = [&](int64_t k, int64_t j) { return tb ? B[j * ldb + k] : B[k * ldb + j]; };
      std::vector<double> expect = C;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k) s += a_at(i, k) * b_at(k, j);
          expect[i * ldc + j] = 0.5 * s + 2.0 * C[i * ldc + j];
        }
      std::vector<double> C64 = C;
      cpu::gemm_f64(ta, tb, M, N, K, 0.5, A.data(), lda, B.data(), ldb, 2.0, C64.data(), ldc);
      CHECK(C64 == expect);
      std::vector<float> Af(A.begin(), A.end()), Bf(B.begin(), B.end()), Cf(C.begin(), C.end());
      cpu::gemm_f32(ta, tb, M, N, K, 0.5f, Af.data(), lda, Bf.data(), ldb, 2.0f, Cf.data(), ldc);
      for (size_t i = 0; i < C.size(); ++i) CHECK(double(Cf[i]) == expect[i]);
    }
  // beta = 0 ignores NaN in C; K = 0 scales C by beta
  std::vector<float> A(6, 1.0f), B(6, 1.0f), C(4, std::numeric_limits<float>::quiet_NaN());
  cpu::gemm_f32(false, false, 2, 2, 3, 1.0f, A.data(), 3, B.data(), 2, 0.0f, C.data(), 2);
  CHECK(C == std::vector<float>(4, 3.0f));
  cpu::gemm_f32(false, false, 2, 2, 0, 1.0f, A.data(), 3, B.data(), 2, 0.5f, C.data(), 2);
  CHECK(C == std::vector<float>(4, 1.5f));
}

TEST_CASE("linear with and without bias") {
  Tensor x = from_f64({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor w = from_f64({1, 0, -1, 2, 1, 0}, {2, 3});  // [out=2, in=3]
  Tensor b = from_f64({10, 20}, {2});
  check_close(linear(x, w), {-2, 4, -2, 13}, 0, 0);
  check_close(linear(x, w, b), {8, 24, 8, 33}, 0, 0);
  Tensor y1 = linear(from_f64({1, 2, 3}, {3}), w, b);  // 1-D input
  CHECK(y1.shape() == Shape{2});
  check_close(y1, {8, 24}, 0, 0);
  // random [*, in] inputs, non-contiguous weight, all float dtypes
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    INFO("dtype ", dtype_name(dt));
    Tensor xr = random_tensor({2, 3, 6}, dt, 41);
    Tensor wr = noncontiguous(random_tensor({4, 6}, dt, 42));
    Tensor br = random_tensor({4}, dt, 43);
    Ref r = ref_matmul(xr, wr.t());
    std::vector<double> bv = to_f64(br);
    for (size_t i = 0; i < r.v.size(); ++i) r.v[i] += bv[i % 4];
    Tensor out = linear(xr, wr, br);
    CHECK(out.shape() == Shape{2, 3, 4});
    CHECK(out.dtype() == dt);
    // f16/bf16: matmul rounds, then the bias add rounds again (|x @ w.T| <= 24 here)
    double rt = dt == kFloat16 ? 4e-3 : dt == kBFloat16 ? 3e-2 : tolerance(dt).first;
    double at = dt == kFloat16 ? 2e-2 : dt == kBFloat16 ? 0.15 : tolerance(dt).second;
    check_close(out, r.v, rt, at);
    check_close(linear(xr, wr), ref_matmul(xr, wr.t()).v);
  }
}

TEST_CASE("linear backward on 16-bit floats folds the batch dims into one GEMM per gradient") {
  for (DType dt : {kBFloat16, kFloat16}) {
    INFO("dtype ", dtype_name(dt));
    Tensor x = random_tensor({3, 5, 6}, dt, 51).requires_grad_(true);
    Tensor w = random_tensor({4, 6}, dt, 52).requires_grad_(true);
    Tensor b = random_tensor({4}, dt, 53).requires_grad_(true);
    Tensor g = random_tensor({3, 5, 4}, dt, 54);
    linear(x, w, b).backward(g);
    // gw is g^T x over all 15 rows in one product (rounded once), not 3 rounded partials
    Tensor g2 = g.reshape({15, 4}), x2 = x.detach().reshape({15, 6});
    REQUIRE(w.grad().shape() == Shape{4, 6});
    CHECK(w.grad().is_contiguous());
    CHECK(bitwise_equal(w.grad(), mm(g2.t(), x2)));
    CHECK(bitwise_equal(x.grad(), matmul(g, w.detach())));
    std::vector<double> gv = to_f64(g2), xv = to_f64(x2), gw_ref(24, 0.0), gb_ref(4, 0.0);
    for (int64_t r = 0; r < 15; ++r)
      for (int64_t n = 0; n < 4; ++n) {
        gb_ref[size_t(n)] += gv[size_t(r * 4 + n)];
        for (int64_t k = 0; k < 6; ++k)
          gw_ref[size_t(n * 6 + k)] += gv[size_t(r * 4 + n)] * xv[size_t(r * 6 + k)];
      }
    const double rt = dt == kBFloat16 ? 1e-2 : 2e-3;
    check_close(w.grad(), gw_ref, rt, rt);
    check_close(b.grad(), gb_ref, rt, rt);
  }
}

TEST_CASE("linalg errors name the op, shapes and dtypes") {
  Tensor a23 = random_tensor({2, 3}), a45 = random_tensor({4, 5});
  CHECK_THROWS_WITH_AS(mm(a23, a45),
                       doctest::Contains("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"),
                       Error);
  CHECK_THROWS_WITH_AS(matmul(a23, a45), doctest::Contains("op `matmul`"), Error);
  CHECK_THROWS_WITH_AS(matmul(a23, a45), doctest::Contains("(2x3 and 4x5)"), Error);
  CHECK_THROWS_WITH_AS(mm(random_tensor({2, 3, 4}), a45), doctest::Contains("[2, 3, 4]"), Error);
  CHECK_THROWS_WITH_AS(matmul(random_tensor({2, 3, 4}), random_tensor({5, 6})),
                       doctest::Contains("[2, 3, 4] and [5, 6]"), Error);
  CHECK_THROWS_WITH_AS(matmul(random_tensor({2, 3, 4}), random_tensor({3, 4, 5})),
                       doctest::Contains("not broadcastable"), Error);
  CHECK_THROWS_WITH_AS(matmul(random_tensor({3}), random_tensor({4})),
                       doctest::Contains("[3] and [4]"), Error);
  CHECK_THROWS_WITH_AS(matmul(scalar_tensor(1, kFloat32), random_tensor({3})),
                       doctest::Contains("at least 1 dimension"), Error);
  CHECK_THROWS_WITH_AS(matmul(a23, random_tensor({3, 4}, kFloat64)),
                       doctest::Contains("float32 and float64"), Error);
  CHECK_THROWS_WITH_AS(matmul(a23.to(kBool), a23.to(kBool).t()), doctest::Contains("bool"), Error);
  CHECK_THROWS_WITH_AS(bmm(a23, a23), doctest::Contains("op `bmm`"), Error);
  CHECK_THROWS_WITH_AS(bmm(random_tensor({2, 3, 4}), random_tensor({3, 4, 5})),
                       doctest::Contains("[2, 3, 4] and [3, 4, 5]"), Error);
  CHECK_THROWS_WITH_AS(bmm(random_tensor({2, 3, 4}), random_tensor({2, 5, 5})),
                       doctest::Contains("op `bmm`"), Error);
  CHECK_THROWS_WITH_AS(linear(a23, a45),
                       doctest::Contains("mat1 and mat2 shapes cannot be multiplied (2x3 and 5x4)"),
                       Error);
  CHECK_THROWS_WITH_AS(linear(a23, random_tensor({4, 3}), random_tensor({5})),
                       doctest::Contains("op `linear`"), Error);
  CHECK_THROWS_WITH_AS(linear(a23, random_tensor({4, 3}), random_tensor({4}, kFloat64)),
                       doctest::Contains("float32 and float64"), Error);
  CHECK_THROWS_WITH_AS(linear(a23, random_tensor({1, 4, 3})), doctest::Contains("[1, 4, 3]"),
                       Error);
  CHECK_THROWS_WITH_AS(linear(a23, random_tensor({4, 3}, kFloat16)),
                       doctest::Contains("float32 and float16"), Error);
}
