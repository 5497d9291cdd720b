// minidl-compare's cost model: ring-allreduce formula values, the least-squares link fit, and the
// projected DDP step (overlap capped by backward, monotonic in N and in link quality).
#include <doctest/doctest.h>

#include <cmath>

#include "apps/compare/cost_model.h"
#include "tensor/error.h"

using namespace minidl::compare;

TEST_SUITE("compare_cost_model") {
  TEST_CASE("ring allreduce: 2(N-1)/N bytes/bw + 2(N-1) latency") {
    const Link l{"t", 1e9, 1e-5};  // 1 GB/s, 10 us
    CHECK(ring_allreduce_seconds(1, 1e6, l) == 0.0);
    // N = 2: 1 * 1e6 / 1e9 + 2 * 1e-5 = 1.02e-3
    CHECK(ring_allreduce_seconds(2, 1e6, l) == doctest::Approx(1.02e-3));
    // N = 4: 1.5e-3 + 6e-5
    CHECK(ring_allreduce_seconds(4, 1e6, l) == doctest::Approx(1.56e-3));
    // N = 64: 2*63/64 ms + 126 * 10 us
    CHECK(ring_allreduce_seconds(64, 1e6, l) == doctest::Approx(2.0 * 63 / 64 * 1e-3 + 1.26e-3));
    // Buckets each pay the latency.
    CHECK(ring_allreduce_seconds(2, std::vector<int64_t>{500000, 500000}, l) ==
          doctest::Approx(1.04e-3));
    CHECK_THROWS_AS(ring_allreduce_seconds(0, 1e6, l), minidl::Error);
    CHECK_THROWS_AS(ring_allreduce_seconds(2, 1e6, Link{"bad", 0, 0}), minidl::Error);
  }

  TEST_CASE("named links and their errors") {
    CHECK(named_link("pcie").bandwidth_Bps == doctest::Approx(12e9));
    CHECK(named_link("eth10").latency_s == doctest::Approx(50e-6));
    CHECK(named_link_names().size() == 4);
    CHECK(named_link("nvlink").describe() == "nvlink (150 GB/s, 5 us)");
    try {
      named_link("token-ring");
      FAIL("expected an error");
    } catch (const minidl::Error& e) {
      CHECK(std::string(e.what()).find("token-ring") != std::string::npos);
      CHECK(std::string(e.what()).find("eth10") != std::string::npos);
    }
  }

  TEST_CASE("fit_line recovers a line and rejects degenerate input") {
    const std::vector<double> x = {1, 2, 3, 4};
    const std::vector<double> y = {3.5, 5.5, 7.5, 9.5};  // 1.5 + 2x
    LineFit f = fit_line(x, y);
    CHECK(f.a == doctest::Approx(1.5));
    CHECK(f.b == doctest::Approx(2.0));
    CHECK(f.r2 == doctest::Approx(1.0));
    CHECK(fit_line({0, 1, 2, 3}, {0, 1.1, 1.9, 3.0}).r2 < 1.0);
    CHECK_THROWS_AS(fit_line({1, 1}, {2, 3}), minidl::Error);
    CHECK_THROWS_AS(fit_line({1}, {2}), minidl::Error);
    CHECK_THROWS_AS(fit_line({1, 2}, {2}), minidl::Error);
  }

  TEST_CASE("fit_link recovers the bandwidth and latency of synthetic allreduces") {
    for (int n : {2, 4}) {
      const Link truth{"truth", 3e9, 40e-6};
      std::vector<double> bytes = {2.5e5, 1e6, 4e6, 8e6}, secs;
      for (double b : bytes) secs.push_back(ring_allreduce_seconds(n, b, truth));
      Link fit = fit_link(n, bytes, secs);
      CHECK(fit.bandwidth_Bps == doctest::Approx(3e9).epsilon(1e-6));
      CHECK(fit.latency_s == doctest::Approx(40e-6).epsilon(1e-6));
    }
    // Shrinking times with size cannot be a link.
    CHECK_THROWS_AS(fit_link(2, {1e6, 2e6}, {2e-3, 1e-3}), minidl::Error);
    CHECK_THROWS_AS(fit_link(1, {1e6, 2e6}, {1e-3, 2e-3}), minidl::Error);
    // A negative intercept (noise) is clamped to zero latency.
    CHECK(fit_link(2, {1e6, 2e6}, {0.9e-3, 2e-3}).latency_s == 0.0);
  }

  TEST_CASE("projected step: compute plus the allreduce not hidden behind backward") {
    StepModel m;
    m.compute_s = 0.030;
    m.backward_s = 0.020;
    m.bucket_bytes = {4000000};
    m.hidden_fraction = 0.9;
    m.per_rank_batch = 64;
    const Link l{"t", 1e9, 0};
    // N = 2: T_ar = 4 ms, hidden 3.6 ms, exposed 0.4 ms.
    Projection p2 = project_step(m, 2, l);
    CHECK(p2.allreduce_s == doctest::Approx(4e-3));
    CHECK(p2.exposed_s == doctest::Approx(0.4e-3));
    CHECK(p2.step_s == doctest::Approx(30.4e-3));
    CHECK(p2.speedup == doctest::Approx(2 * 30.0 / 30.4));
    CHECK(p2.efficiency == doctest::Approx(30.0 / 30.4));
    CHECK(p2.samples_per_s == doctest::Approx(128 / 30.4e-3));
    // N = 1: no communication, speedup 1.
    Projection p1 = project_step(m, 1, l);
    CHECK(p1.step_s == doctest::Approx(m.compute_s));
    CHECK(p1.speedup == doctest::Approx(1.0));
    // Ranks slowed down by sharing a machine: N = 1 is the device alone, the base of speedups.
    StepModel shared = m;
    shared.single_s = 0.025;
    CHECK(project_step(shared, 1, l).step_s == doctest::Approx(0.025));
    CHECK(project_step(shared, 1, l).speedup == doctest::Approx(1.0));
    CHECK(project_step(shared, 2, l).step_s == doctest::Approx(30.4e-3));
    CHECK(project_step(shared, 2, l).speedup == doctest::Approx(2 * 25.0 / 30.4));
    // A slow link: hiding is capped by the backward time (20 ms).
    Projection slow = project_step(m, 2, Link{"slow", 1e8, 0});  // T_ar = 40 ms
    CHECK(slow.exposed_s == doctest::Approx(0.040 - 0.020));
    // h = 0 exposes everything.
    m.hidden_fraction = 0;
    CHECK(project_step(m, 2, l).exposed_s == doctest::Approx(4e-3));
    m.compute_s = 0;
    CHECK_THROWS_AS(project_step(m, 2, l), minidl::Error);
  }

  TEST_CASE("projection: step time grows with N, speedup grows, efficiency falls") {
    StepModel m;
    m.compute_s = 0.05;
    m.backward_s = 0.03;
    m.bucket_bytes = {1 << 20, 4 << 20};
    m.hidden_fraction = 0.5;
    m.per_rank_batch = 32;
    const std::vector<int> ns = {1, 2, 4, 8, 16, 32, 64};
    for (const std::string& name : named_link_names()) {
      auto pts = project(m, ns, named_link(name));
      REQUIRE(pts.size() == ns.size());
      for (size_t i = 1; i < pts.size(); ++i) {
        CHECK(pts[i].step_s >= pts[i - 1].step_s);
        CHECK(pts[i].speedup > pts[i - 1].speedup);
        CHECK(pts[i].efficiency <= pts[i - 1].efficiency + 1e-12);
        CHECK(pts[i].speedup <= double(ns[i]) + 1e-9);
      }
    }
    // A faster link never predicts a slower step.
    auto eth = project(m, ns, named_link("eth10"));
    auto nv = project(m, ns, named_link("nvlink"));
    for (size_t i = 0; i < ns.size(); ++i) CHECK(nv[i].step_s <= eth[i].step_s);
  }
}
