// minidl-compare's cost model: ring-allreduce formula values, the least-squares link fit, the
// projected DDP step (overlap capped by backward, monotonic in N and in link quality) and the
// DDP variants' terms (compressed bytes, PowerSGD's two allreduces, broadcasts, ZeRO-1).
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
  TEST_CASE("variants: a comm hook's bytes, PowerSGD's messages, buffer and ZeRO broadcasts") {
    const Link l{"t", 1e9, 1e-5};  // 1 GB/s, 10 us
    StepModel m;
    m.compute_s = 0.05;
    m.backward_s = 0.0;  // nothing hidden: exposed = T_ar
    m.bucket_bytes = {1000000, 1000000};
    m.per_rank_batch = 32;
    const Projection plain = project_step(m, 2, l);
    CHECK(plain.allreduce_s == doctest::Approx(2 * 1.02e-3));
    CHECK(plain.broadcast_s == 0.0);
    // fp16/bf16: half the payload, the same number of messages.
    m.wire_scale = 0.5;
    CHECK(project_step(m, 2, l).allreduce_s == doctest::Approx(2 * (0.5e-3 + 2e-5)));
    // PowerSGD: a tenth of the bytes in two allreduces per bucket (each pays the latency).
    m.wire_scale = 0.1;
    m.messages_per_bucket = 2;
    CHECK(project_step(m, 4, l).allreduce_s == doctest::Approx(2 * (1.5 * 0.1e-3 + 2 * 6e-5)));
    CHECK(project_step(m, 1, l).allreduce_s == 0.0);
    // On the slow link compression wins; on N = 1 nothing is sent.
    StepModel f = m;
    f.messages_per_bucket = 1;
    f.wire_scale = 1;
    CHECK(project_step(m, 8, named_link("eth10")).step_s <
          project_step(f, 8, named_link("eth10")).step_s);
    // Buffer broadcasts: ceil(log2 N) latencies each + bytes / bandwidth, exposed.
    StepModel b;
    b.compute_s = 0.05;
    b.broadcasts = 18;
    b.broadcast_bytes = 1000;
    CHECK(broadcast_seconds(1, b, l) == 0.0);
    CHECK(broadcast_seconds(2, b, l) == doctest::Approx(18 * 1e-5 + 1e-6));
    CHECK(broadcast_seconds(8, b, l) == doctest::Approx(18 * 3 * 1e-5 + 1e-6));
    const double coalesced = [&] {
      StepModel c = b;
      c.broadcasts = 2;
      return broadcast_seconds(8, c, l);
    }();
    CHECK(coalesced < broadcast_seconds(8, b, l) / 8);
    CHECK(project_step(b, 8, l).exposed_s == doctest::Approx(broadcast_seconds(8, b, l)));
    // ZeRO-1: each owner rank broadcasts its shard after the step (one per dtype).
    StepModel z;
    z.compute_s = 0.05;
    z.after_step_bytes = 4000000;
    z.after_step_per_rank = 1;
    CHECK(broadcast_seconds(4, z, l) == doctest::Approx(4 * 2 * 1e-5 + 4e-3));
    CHECK(project_step(z, 4, l).step_s == doctest::Approx(0.05 + broadcast_seconds(4, z, l)));
  }
}
