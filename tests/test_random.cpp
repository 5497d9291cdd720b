// Random number tests: Philox 4x32-10 known answers (Random123), the element -> counter
// contract of tensor/random.h (kernels match per-element stream functions bit for bit),
// determinism, non-overlapping draws, thread-count independence, statistics, randperm,
// dropout masks and argument errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "test_util.h"

using namespace minidl;
using testutil::to_f64;

namespace {

struct Moments {
  double mean, var;
};
Moments moments(const std::vector<double>& v) {
  double m = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return {m, s / double(v.size() - 1)};
}

// Restores the OpenMP thread count at scope exit.
struct ThreadGuard {
  int saved = get_num_threads();
  ~ThreadGuard() { set_num_threads(saved); }
};

}  // namespace

TEST_CASE("philox4x32_10 matches the Random123 known-answer vectors") {
  auto check = [](Philox4x32 r, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    CHECK(r.v[0] == a);
    CHECK(r.v[1] == b);
    CHECK(r.v[2] == c);
    CHECK(r.v[3] == d);
  };
  check(philox4x32_10(0, 0, 0, 0, 0, 0), 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u);
  const uint32_t f = 0xffffffffu;
  check(philox4x32_10(f, f, f, f, f, f), 0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu);
  check(philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u),
        0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u);
}

TEST_CASE("PhiloxStream element mapping") {
  PhiloxStream s{0x1234567890abcdefull, (uint64_t(1) << 32) - 1};  // counter crosses 2^32
  Philox4x32 b1 = s.block(1);
  Philox4x32 ref = philox4x32_10(0, 1, 0, 0, 0x90abcdefu, 0x12345678u);  // counter 2^32
  for (int k = 0; k < 4; ++k) CHECK(b1.v[k] == ref.v[k]);
  CHECK(s.word(6) == b1.v[2]);
  CHECK(s.word64(3) == ((uint64_t(b1.v[2]) << 32) | b1.v[3]));
  CHECK(PhiloxStream::to_unit_float(0xffffffffu) == doctest::Approx(1.0 - 1.0 / 16777216.0));
  CHECK(PhiloxStream::to_unit_float(0xffffffffu) < 1.0f);
  CHECK(PhiloxStream::to_unit_float(0xffffffffu, 8) == 255.0f / 256.0f);
  CHECK(PhiloxStream::to_unit_double(~uint64_t(0)) < 1.0);
  CHECK(PhiloxStream::to_unit_double(0x12345678u, 0x9abcdef0u) ==
        PhiloxStream::to_unit_double(0x123456789abcdef0ull));
  double z0, z1;
  PhiloxStream::box_muller(0, z0, z1);  // u1 = 2^-32 (smallest), u2 = 0
  CHECK(z0 == doctest::Approx(std::sqrt(64.0 * std::log(2.0))));
  CHECK(z1 == 0.0);
  PhiloxStream::box_muller(~uint64_t(0), z0, z1);  // u1 = 1: radius 0
  CHECK(z0 == 0.0);
  CHECK(std::abs(z1) == 0.0);
  // normal element 6 = cos branch of lane 1 of block 1; element 5 = sin branch of lane 0
  PhiloxStream::box_muller(PhiloxStream::lane64(b1, 1), z0, z1);
  CHECK(s.normal(6) == z0);
  CHECK(s.normal(7) == z1);
  PhiloxStream::box_muller(PhiloxStream::lane64(b1, 0), z0, z1);
  CHECK(s.normal(5) == z1);
  CHECK(PhiloxStream::blocks32(9) == 3);
  CHECK(PhiloxStream::blocks64(9) == 5);
}

TEST_CASE("kernels follow the documented stream contract bit for bit") {
  const int64_t n = 37;
  Generator gen(99);
  gen.set_state(99, 1000);
  PhiloxStream s{99, 1000};

  Tensor u = rand({n}, kFloat32, kCPU, &gen);
  CHECK(gen.offset() == 1000 + 10);  // ceil(37/4)
  std::vector<float> uf = u.tolist<float>();
  for (int64_t i = 0; i < n; ++i) CHECK(uf[size_t(i)] == s.uniform(uint64_t(i)));

  s.offset = gen.offset();
  Tensor d = empty({n}, kFloat64);
  uniform_(d, -2.0, 3.0, &gen);
  CHECK(gen.offset() == s.offset + 19);  // ceil(37/2)
  std::vector<double> dv = to_f64(d);
  for (int64_t i = 0; i < n; ++i)
    CHECK(dv[size_t(i)] == std::fma(s.uniform_double(uint64_t(i)), 5.0, -2.0));

  s.offset = gen.offset();
  Tensor z = randn({n}, kFloat32, kCPU, &gen);
  CHECK(gen.offset() == s.offset + 10);  // 4 normals per block
  std::vector<float> zf = z.tolist<float>();
  for (int64_t i = 0; i < n; ++i) CHECK(zf[size_t(i)] == float(s.normal(uint64_t(i))));

  s.offset = gen.offset();
  Tensor h = empty({n}, kFloat16);
  normal_(h, 1.0, 2.0, &gen);
  std::vector<double> hv = to_f64(h);
  for (int64_t i = 0; i < n; ++i)
    CHECK(hv[size_t(i)] == double(float(Half(float(std::fma(s.normal(uint64_t(i)), 2.0, 1.0))))));

  s.offset = gen.offset();
  Tensor ri = randint(-5, 12, {n}, kInt64, kCPU, &gen);
  CHECK(gen.offset() == s.offset + 10);
  std::vector<int64_t> rv = ri.tolist<int64_t>();
  for (int64_t i = 0; i < n; ++i) CHECK(rv[size_t(i)] == -5 + int64_t(s.word(uint64_t(i)) % 17));

  s.offset = gen.offset();
  const int64_t big = int64_t(1) << 40;
  Tensor rb = randint(3, 3 + big, {n}, kInt64, kCPU, &gen);
  CHECK(gen.offset() == s.offset + 19);
  rv = rb.tolist<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    CHECK(rv[size_t(i)] == 3 + int64_t(s.word64(uint64_t(i)) % uint64_t(big)));

  s.offset = gen.offset();
  Tensor bm = bernoulli({n}, 0.25, kFloat64, kCPU, &gen);
  dv = to_f64(bm);
  for (int64_t i = 0; i < n; ++i)
    CHECK(dv[size_t(i)] == (double(s.word(uint64_t(i))) / 4294967296.0 < 0.25 ? 1.0 : 0.0));
}

TEST_CASE("same seed gives the same numbers and consecutive draws never overlap") {
  manual_seed(42);
  std::vector<double> a = to_f64(randn({3, 5}));
  std::vector<double> b = to_f64(rand({7}));
  manual_seed(42);
  CHECK(to_f64(randn({3, 5})) == a);
  CHECK(to_f64(rand({7})) == b);
  CHECK(default_generator().seed() == 42);
  manual_seed(43);
  CHECK(to_f64(randn({3, 5})) != a);

  // rand(5) reserves 2 blocks (8 words), so the next draw starts at word 8: two draws are
  // exactly disjoint slices of one longer draw.
  Generator g1(7), g2(7);
  std::vector<float> first = rand({5}, kFloat32, kCPU, &g1).tolist<float>();
  std::vector<float> second = rand({8}, kFloat32, kCPU, &g1).tolist<float>();
  std::vector<float> all = rand({16}, kFloat32, kCPU, &g2).tolist<float>();
  for (int i = 0; i < 5; ++i) CHECK(first[size_t(i)] == all[size_t(i)]);
  for (int i = 0; i < 8; ++i) CHECK(second[size_t(i)] == all[size_t(8 + i)]);

  // zero-size draws consume nothing
  uint64_t off = g1.offset();
  Tensor e = rand({0, 3}, kFloat32, kCPU, &g1);
  CHECK(e.shape() == Shape{0, 3});
  CHECK(g1.offset() == off);
}

TEST_CASE("results are identical for any thread count") {
  ThreadGuard guard;
  const Shape shape{300, 334};  // > 2 * grain: parallel path
  auto draw_all = [&] {
    Generator g(2024);
    std::vector<std::vector<double>> r;
    r.push_back(to_f64(rand(shape, kFloat32, kCPU, &g)));
    r.push_back(to_f64(rand(shape, kFloat64, kCPU, &g)));
    r.push_back(to_f64(randn(shape, kBFloat16, kCPU, &g)));
    r.push_back(to_f64(randint(0, 1000, shape, kInt32, kCPU, &g)));
    r.push_back(to_f64(bernoulli(shape, 0.4, kFloat32, kCPU, &g)));
    r.push_back(to_f64(dropout_mask(shape, 0.1, kFloat16, kCPU, &g)));
    return r;
  };
  set_num_threads(1);
  auto one = draw_all();
  set_num_threads(2);
  auto two = draw_all();
  set_num_threads(3);
  auto three = draw_all();
  for (size_t k = 0; k < one.size(); ++k) {
    CAPTURE(k);
    CHECK(one[k] == two[k]);
    CHECK(one[k] == three[k]);
  }
}

TEST_CASE("uniform statistics and ranges for every floating dtype") {
  const int64_t n = 100000;
  Generator g(1);
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    CAPTURE(dt);
    Tensor t = rand({n}, dt, kCPU, &g);
    CHECK(t.dtype() == dt);
    std::vector<double> v = to_f64(t);
    CHECK(*std::min_element(v.begin(), v.end()) >= 0.0);
    CHECK(*std::max_element(v.begin(), v.end()) < 1.0);
    Moments m = moments(v);
    CHECK(std::abs(m.mean - 0.5) < 0.005);         // 4 sigma = 0.0037
    CHECK(std::abs(m.var - 1.0 / 12.0) < 0.0015);  // + quantisation of bf16 (8 bits)
  }
  Tensor w = empty({n}, kFloat64);
  uniform_(w, -3.0, 5.0, &g);
  std::vector<double> v = to_f64(w);
  CHECK(*std::min_element(v.begin(), v.end()) >= -3.0);
  CHECK(*std::max_element(v.begin(), v.end()) < 5.0);
  Moments m = moments(v);
  CHECK(std::abs(m.mean - 1.0) < 0.03);         // 4 sigma = 0.029
  CHECK(std::abs(m.var - 64.0 / 12.0) < 0.07);  // 4 sigma = 0.06
  // low == high is allowed (PyTorch): every element equals low
  Tensor c = empty({4});
  uniform_(c, 2.0, 2.0, &g);
  CHECK(to_f64(c) == std::vector<double>(4, 2.0));
}

TEST_CASE("normal statistics") {
  const int64_t n = 100000;
  Generator g(2);
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    CAPTURE(dt);
    std::vector<double> v = to_f64(randn({n}, dt, kCPU, &g));
    Moments m = moments(v);
    CHECK(std::abs(m.mean) < 0.013);       // 4 sigma = 0.0126
    CHECK(std::abs(m.var - 1.0) < 0.025);  // 4 sigma = 0.018 (+ rounding)
    double within =
        double(std::count_if(v.begin(), v.end(), [](double x) { return std::abs(x) < 1.0; })) /
        double(n);
    CHECK(std::abs(within - 0.682689) < 0.008);  // Gaussian shape; 4 sigma = 0.0059
  }
  Tensor t = empty({200, 500});
  normal_(t, 2.0, 3.0, &g);
  Moments m = moments(to_f64(t));
  CHECK(std::abs(m.mean - 2.0) < 0.04);
  CHECK(std::abs(std::sqrt(m.var) - 3.0) < 0.03);
  Tensor z = empty({5});
  normal_(z, 1.5, 0.0, &g);
  CHECK(to_f64(z) == std::vector<double>(5, 1.5));
}

TEST_CASE("uniform_ and normal_ on non-contiguous views") {
  Tensor view = testutil::noncontiguous(testutil::from_f64(std::vector<double>(12, 0.0), {3, 4}));
  REQUIRE(!view.is_contiguous());
  Tensor base = view.as_strided({3, 8}, {8, 1}, view.storage_offset());
  Generator g(5);
  uniform_(view, 10.0, 20.0, &g);
  // the view receives a contiguous draw: element i (row-major in the view) = stream element i
  PhiloxStream s{5, 0};
  std::vector<double> v = to_f64(view);
  for (size_t i = 0; i < v.size(); ++i) CHECK(v[i] == double(std::fma(s.uniform(i), 10.0f, 10.0f)));
  std::vector<double> all = to_f64(base);
  for (size_t i = 1; i < all.size(); i += 2) CHECK(all[i] == 0.0);  // gaps untouched
  s.offset = g.offset();
  Tensor tv = empty({4, 3}, kFloat64).t();
  normal_(tv, 0.0, 1.0, &g);
  std::vector<double> nv = to_f64(tv);
  for (size_t i = 0; i < nv.size(); ++i) CHECK(nv[i] == s.normal(i));
}

TEST_CASE("bernoulli frequency and dtypes") {
  const int64_t n = 100000;
  Generator g(3);
  std::vector<double> v = to_f64(bernoulli({n}, 0.3, kFloat32, kCPU, &g));
  double ones = double(std::count(v.begin(), v.end(), 1.0));
  CHECK(double(std::count(v.begin(), v.end(), 0.0)) + ones == double(n));
  CHECK(std::abs(ones / double(n) - 0.3) < 0.006);  // 4 sigma = 0.0058
  CHECK(to_f64(bernoulli({50}, 0.0, kFloat32, kCPU, &g)) == std::vector<double>(50, 0.0));
  CHECK(to_f64(bernoulli({50}, 1.0, kFloat32, kCPU, &g)) == std::vector<double>(50, 1.0));
  for (DType dt : {kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8, kBool}) {
    CAPTURE(dt);
    Tensor t = bernoulli({1000}, 0.5, dt, kCPU, &g);
    CHECK(t.dtype() == dt);
    std::vector<double> b = to_f64(t);
    double c = double(std::count(b.begin(), b.end(), 1.0));
    CHECK(double(std::count(b.begin(), b.end(), 0.0)) + c == 1000.0);
    CHECK(std::abs(c - 500.0) < 70.0);  // 4.4 sigma
  }
}

TEST_CASE("randint range, coverage and dtypes") {
  const int64_t n = 100000;
  Generator g(4);
  Tensor t = randint(-3, 7, {n}, kInt64, kCPU, &g);
  CHECK(t.dtype() == kInt64);
  std::map<int64_t, int64_t> counts;
  for (int64_t x : t.tolist<int64_t>()) ++counts[x];
  REQUIRE(counts.size() == 10);
  CHECK(counts.begin()->first == -3);
  CHECK(counts.rbegin()->first == 6);
  for (auto [k, c] : counts) {
    CAPTURE(k);
    CHECK(std::abs(double(c) / double(n) - 0.1) < 0.004);  // 4 sigma = 0.0038
  }
  const int64_t big = int64_t(1) << 45;
  std::vector<double> bv = to_f64(randint(-big, big, {10000}, kInt64, kCPU, &g));
  CHECK(*std::min_element(bv.begin(), bv.end()) >= double(-big));
  CHECK(*std::max_element(bv.begin(), bv.end()) < double(big));
  CHECK(std::abs(moments(bv).mean) < 0.05 * double(big));  // 4 sigma = 0.023 * big
  for (DType dt : {kInt32, kUInt8, kFloat32, kFloat64, kFloat16, kBFloat16, kBool}) {
    CAPTURE(dt);
    int64_t hi = dt == kBool ? 2 : 5;
    std::vector<double> v = to_f64(randint(0, hi, {400}, dt, kCPU, &g));
    for (double x : v) CHECK((x >= 0 && x < double(hi) && x == std::floor(x)));
    CHECK(std::count(v.begin(), v.end(), double(hi - 1)) > 0);
  }
  CHECK(to_f64(randint(9, 10, {6}, kInt64, kCPU, &g)) == std::vector<double>(6, 9.0));
}

TEST_CASE("randperm is a deterministic uniform permutation") {
  for (int64_t n : {0, 1, 2, 17, 1000}) {
    CAPTURE(n);
    Generator g(11);
    Tensor p = randperm(n, &g);
    CHECK(p.dtype() == kInt64);
    CHECK(p.shape() == Shape{n});
    std::vector<int64_t> v = p.tolist<int64_t>();
    std::vector<int64_t> sorted = v;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> iota(static_cast<size_t>(n));
    std::iota(iota.begin(), iota.end(), int64_t(0));
    CHECK(sorted == iota);
    Generator g2(11);
    CHECK(randperm(n, &g2).tolist<int64_t>() == v);
    if (n == 1000) {
      CHECK(v != iota);
      Generator g3(12);
      CHECK(randperm(n, &g3).tolist<int64_t>() != v);
    }
  }
  // all 3! orders appear with frequency ~1/6
  Generator g(13);
  std::map<std::vector<int64_t>, int> counts;
  for (int k = 0; k < 6000; ++k) ++counts[randperm(3, &g).tolist<int64_t>()];
  CHECK(counts.size() == 6);
  for (auto& [perm, c] : counts) CHECK(std::abs(c - 1000) < 120);  // 4 sigma = 115
}

TEST_CASE("dropout_mask values, keep rate and edge probabilities") {
  Generator g(6);
  const double p = 0.25;
  const int64_t n = 100000;
  std::vector<double> v = to_f64(dropout_mask({n}, p, kFloat32, kCPU, &g));
  const double scale = double(float(1.0 / (1.0 - p)));
  double zeros = double(std::count(v.begin(), v.end(), 0.0));
  CHECK(zeros + double(std::count(v.begin(), v.end(), scale)) == double(n));
  CHECK(std::abs(zeros / double(n) - p) < 0.006);
  std::vector<double> h = to_f64(dropout_mask({1000}, 0.3, kFloat16, kCPU, &g));
  const double hscale = double(float(Half(float(1.0 / 0.7))));
  for (double x : h) CHECK((x == 0.0 || x == hscale));
  uint64_t off = g.offset();
  CHECK(to_f64(dropout_mask({4}, 0.0, kFloat32, kCPU, &g)) == std::vector<double>(4, 1.0));
  CHECK(to_f64(dropout_mask({4}, 1.0, kFloat64, kCPU, &g)) == std::vector<double>(4, 0.0));
  CHECK(g.offset() == off);  // edge probabilities draw nothing
}

TEST_CASE("random ops reject bad arguments") {
  CHECK_THROWS_WITH_AS(randint(5, 5, {3}), doctest::Contains("randint"), Error);
  CHECK_THROWS_WITH_AS(randint(5, 5, {3}), doctest::Contains("low=5 >= high=5"), Error);
  CHECK_THROWS_WITH_AS(randint(0, 300, {3}, kUInt8),
                       doctest::Contains("out of bounds for dtype uint8"), Error);
  CHECK_THROWS_WITH_AS(randint(-1, 2, {3}, kBool), doctest::Contains("randint"), Error);
  CHECK_THROWS_WITH_AS(randint(0, int64_t(1) << 60, {3}), doctest::Contains("2^53"), Error);
  CHECK_THROWS_WITH_AS(rand({3}, kInt64), doctest::Contains("op `rand` needs a floating dtype"),
                       Error);
  CHECK_THROWS_WITH_AS(randn({3}, kBool), doctest::Contains("op `randn`"), Error);
  Tensor t = empty({3});
  CHECK_THROWS_WITH_AS(uniform_(t, 2.0, 1.0), doctest::Contains("low=2 > high=1"), Error);
  CHECK_THROWS_WITH_AS(uniform_(t, 0.0, INFINITY), doctest::Contains("finite"), Error);
  CHECK_THROWS_WITH_AS(normal_(t, 0.0, -1.0), doctest::Contains("std >= 0.0, but found std -1"),
                       Error);
  Tensor ti = empty({3}, kInt64);
  CHECK_THROWS_WITH_AS(uniform_(ti), doctest::Contains("op `uniform_` needs a floating dtype"),
                       Error);
  CHECK_THROWS_WITH_AS(normal_(ti), doctest::Contains("op `normal_`"), Error);
  CHECK_THROWS_WITH_AS(bernoulli({3}, 1.5), doctest::Contains("p in [0, 1], got p=1.5"), Error);
  CHECK_THROWS_WITH_AS(bernoulli({3}, -0.1), doctest::Contains("bernoulli"), Error);
  CHECK_THROWS_WITH_AS(randperm(-1), doctest::Contains("op `randperm`: expected n >= 0"), Error);
  CHECK_THROWS_WITH_AS(dropout_mask({3}, 1.5, kFloat32, kCPU),
                       doctest::Contains("between 0 and 1, but got 1.5"), Error);
  CHECK_THROWS_WITH_AS(dropout_mask({3}, -0.5, kFloat32, kCPU), doctest::Contains("dropout"),
                       Error);
  CHECK_THROWS_WITH_AS(dropout_mask({3}, 0.5, kInt64, kCPU),
                       doctest::Contains("op `dropout_mask` needs a floating dtype"), Error);
}
