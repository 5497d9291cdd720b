// minidl-compare's report on synthetic rows: the loss check names the disagreeing modes, the
// explanations come from the numbers, the projection reproduces a known link, DDP variants get
// their own tolerance, columns and projection, and a row survives the JSON round trip.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "apps/compare/report.h"

using namespace minidl::compare;

namespace {

RunResult row(const std::string& mode, int devices, double step_s, std::vector<double> losses) {
  RunResult r;
  r.mode = r.label = mode;
  r.device = "cpu";
  r.devices = devices;
  r.threads = 1;
  r.global_batch = 128;
  r.per_rank_batch = 128 / devices;
  r.step_s = {step_s, step_s, step_s * 1.5};
  r.losses = std::move(losses);
  return r;
}

}  // namespace

TEST_SUITE("compare_report") {
  TEST_CASE("loss check: agreement, a named disagreement, NaN and different lengths") {
    std::vector<RunResult> rows = {row("single", 1, 0.08, {2.30, 2.20, 2.10}),
                                   row("dp", 2, 0.05, {2.30, 2.20001, 2.10}),
                                   row("ddp", 2, 0.045, {2.30, 2.20, 2.1000001})};
    Consistency ok = check_consistency(rows, 1e-4);
    CHECK(ok.error.empty());
    CHECK(ok.steps == 3);
    CHECK(ok.reference == "single");
    CHECK(ok.max_rel_diff == doctest::Approx(0.00001 / 2.2).epsilon(1e-3));

    rows[2].losses[1] = 2.3;
    Consistency bad = check_consistency(rows, 1e-4);
    CHECK(bad.error.find("modes single and ddp disagree at step 1") != std::string::npos);
    CHECK(bad.error.find("2.2 vs 2.3") != std::string::npos);

    rows[2].losses[1] = std::numeric_limits<double>::quiet_NaN();
    CHECK(check_consistency(rows, 1e-4).error.find("single and ddp") != std::string::npos);

    rows[2].losses = {2.3, 2.2};
    CHECK(check_consistency(rows, 1e-4).error.find("different numbers of steps") !=
          std::string::npos);
  }

  TEST_CASE("speedup, efficiency and explanations from the numbers") {
    Report rep;
    rep.rows = {row("single", 1, 0.080, {1}), row("dp", 2, 0.050, {1}), row("ddp", 2, 0.040, {1})};
    rep.rows[1].breakdown.dp_replicate = 0.010;  // 10 ms of a 50 ms step (mean 55 ms)
    rep.rows[2].comm_s = 0.010;
    rep.rows[2].exposed_s = 0.001;
    rep.rows[2].hidden_fraction = 0.9;
    rep.rows[2].bucket_bytes = {1000000, 3800000};
    CHECK(rep.speedup(rep.rows[0]) == doctest::Approx(1.0));
    CHECK(rep.speedup(rep.rows[2]) == doctest::Approx(2.0));
    CHECK(rep.efficiency(rep.rows[2]) == doctest::Approx(1.0));
    CHECK(rep.efficiency(rep.rows[1]) == doctest::Approx(0.8));
    std::vector<std::string> lines = explain(rep);
    auto has = [&](const std::string& s) {
      for (const auto& l : lines)
        if (l.find(s) != std::string::npos) return true;
      return false;
    };
    // dp: mean step = 0.05 * 3.5 / 3 s; 10 ms of it re-synchronising = 17%.
    CHECK(has("dp spends 17% of its step re-synchronising replicas"));
    CHECK(has("ddp hides 90% of its allreduce (10.0 ms per step, 2 bucket(s), 4.8 MB)"));
    CHECK(has("Fastest: ddp at 2.00x"));
    const std::string table = format_table(rep);
    CHECK(table.find("| ddp | 2 | 1 | 2743 |") != std::string::npos);
  }

  TEST_CASE("projection from measured rows recovers the link and predicts the 2-process step") {
    Report rep;
    RunResult single = row("single", 1, 0.080, {1});
    single.compute_batch = 64;
    single.compute_step_s = 0.040;
    single.compute_backward_s = 0.025;
    RunResult ddp = row("ddp", 2, 0.041, {1});
    ddp.breakdown.forward = 0.015;  // a rank's compute: 44 ms (slower than the 40 ms alone)
    ddp.breakdown.backward = 0.026;
    ddp.breakdown.optimizer = 0.002;
    ddp.breakdown.data_wait = 0.001;
    ddp.bucket_bytes = {1 << 20, 4 << 20};
    ddp.hidden_fraction = 0.8;
    const Link truth{"truth", 2e9, 50e-6};
    for (double b : {3e5, 1.2e6, 4.8e6, 9.6e6}) {
      ddp.sweep_bytes.push_back(b);
      ddp.sweep_s.push_back(ring_allreduce_seconds(2, b, truth));
    }
    rep.rows = {single, ddp};
    build_projection(rep, {named_link("eth10")});
    REQUIRE(rep.has_model);
    CHECK(rep.local.bandwidth_Bps == doctest::Approx(2e9));
    CHECK(rep.local.latency_s == doctest::Approx(50e-6));
    REQUIRE(rep.projections.size() == 2);
    CHECK(rep.projections[1].link.name == "eth10");
    CHECK(rep.projections[0].points.back().devices == 64);
    const double t_ar = ring_allreduce_seconds(2, ddp.bucket_bytes, truth);
    CHECK(rep.model.compute_s == doctest::Approx(0.044));
    CHECK(rep.model.single_s == doctest::Approx(0.040));
    CHECK(rep.model.backward_s == doctest::Approx(0.026));
    CHECK(rep.predicted_step_s == doctest::Approx(0.044 + 0.2 * t_ar));
    CHECK(rep.projections[0].points[0].step_s == doctest::Approx(0.040));
    CHECK(rep.projections[0].points[1].speedup ==
          doctest::Approx(2 * 0.040 / rep.predicted_step_s));
    CHECK(rep.measured_step_s == doctest::Approx(0.041));
    nlohmann::json j = report_json(rep);
    CHECK(j["model"]["predicted_step_ms"].get<double>() ==
          doctest::Approx(rep.predicted_step_s * 1e3));
    CHECK(j["projection"].size() == 14);
    CHECK(j["rows"][1]["mode"] == "ddp");
    CHECK(j["rows"][1]["samples_per_s"].get<double>() > 0);
    // Allreduce times that do not grow with size (a burst of other work): named links only.
    Report noisy;
    noisy.rows = {single, ddp};
    noisy.rows[1].sweep_s = {4e-3, 3e-3, 2e-3, 1e-3};
    build_projection(noisy, {named_link("pcie")});
    CHECK(noisy.has_model);
    CHECK_FALSE(noisy.has_local);
    CHECK(noisy.local_error.find("does not grow") != std::string::npos);
    REQUIRE(noisy.projections.size() == 1);
    CHECK(noisy.projections[0].link.name == "pcie");
    CHECK(report_json(noisy)["model"]["predicted_step_ms"].is_null());
    CHECK(format_projection(noisy).find("no fitted link") != std::string::npos);
    // Without a single row T_1 is the ranks' own compute (T_c); without a ddp row no model.
    Report none;
    none.rows = {ddp};
    build_projection(none, {});
    REQUIRE(none.has_model);
    CHECK(none.model.single_s == 0.0);
    CHECK(none.projections[0].points[0].step_s == doctest::Approx(0.044));
    Report nothing;
    nothing.rows = {single};
    build_projection(nothing, {});
    CHECK_FALSE(nothing.has_model);
  }

  TEST_CASE("DDP variants: modes, own loss tolerance, columns and per-row projection") {
    CHECK(parse_mode("ddp-zero1").zero1);
    CHECK(parse_mode("ddp-syncbn").sync_bn);
    CHECK(parse_mode("ddp-bf16").comm_hook == "bf16");
    CHECK(parse_mode("ddp-powersgd", 4).comm_hook == "powersgd:4:2");
    CHECK(parse_mode("ddp-fp16").base == "ddp");
    CHECK(parse_mode("dp").base == "dp");
    CHECK(is_ddp_mode("ddp-fp16"));
    CHECK_FALSE(is_ddp_mode("dp"));
    try {
      parse_mode("ddp-int8");
      FAIL("expected an error");
    } catch (const std::exception& e) {
      CHECK(std::string(e.what()).find("unknown mode 'ddp-int8'") != std::string::npos);
      CHECK(std::string(e.what()).find("ddp-powersgd") != std::string::npos);
    }

    // Who gets an own tolerance: per-replica BatchNorm (not ddp-syncbn) and the comm hooks.
    auto tol = [](const std::string& mode, const std::string& model) {
      RunResult r = row(mode, 2, 0.04, {1});
      set_row_tolerance(r, model);
      return r;
    };
    CHECK(tol("ddp", "mnist-cnn").tolerance == 0.0);
    CHECK(tol("ddp-zero1", "resnet-mini").tolerance == doctest::Approx(1e-2));
    CHECK(tol("ddp", "resnet-mini").tolerance_reason == "per-replica BatchNorm statistics");
    CHECK(tol("ddp-syncbn", "resnet-mini").tolerance == 0.0);
    CHECK(tol("single", "resnet-mini").tolerance == 0.0);
    CHECK(tol("ddp-fp16", "mnist-cnn").tolerance == doctest::Approx(1e-3));
    CHECK(tol("ddp-bf16", "gpt").tolerance_reason == "bf16 gradients");
    CHECK(tol("ddp-powersgd", "resnet-mini").tolerance == doctest::Approx(5e-2));

    // A row with its own tolerance passes within it and fails beyond it, naming the reason.
    std::vector<RunResult> rows = {row("ddp", 2, 0.04, {2.30, 2.20}),
                                   row("ddp-bf16", 2, 0.04, {2.30, 2.21})};
    CHECK(check_consistency(rows, 1e-4).error.find("disagree at step 1") != std::string::npos);
    rows[1].tolerance = 1e-2;
    rows[1].tolerance_reason = "bf16 gradients";
    Consistency c = check_consistency(rows, 1e-4);
    CHECK(c.error.empty());
    CHECK(c.max_rel_diff == 0.0);
    CHECK(c.loose_max_rel_diff == doctest::Approx(0.01 / 2.2).epsilon(1e-3));
    rows[1].losses[1] = 2.3;
    CHECK(check_consistency(rows, 1e-4).error.find("for bf16 gradients") != std::string::npos);
    rows[1].losses[1] = 2.21;

    // Two ddp-family rows: the plain one is the model's, both get a projection of their own.
    rows[0].breakdown.forward = 0.01, rows[0].breakdown.backward = 0.02;
    rows[0].bucket_bytes = {4000000};
    rows[0].grad_bytes_per_step = 4000000;
    rows[0].sweep_bytes = {1e5, 1e6, 4e6};
    for (double b : rows[0].sweep_bytes)
      rows[0].sweep_s.push_back(ring_allreduce_seconds(2, b, Link{"x", 1e9, 1e-5}));
    rows[0].optimizer_state_bytes = 3 << 20;
    rows[0].optimizer_state_total = 6 << 20;
    rows[1].breakdown = rows[0].breakdown;
    rows[1].bucket_bytes = {4000000};
    rows[1].grad_bytes_per_step = 2000000;  // bf16: half
    rows[1].payload_bytes_per_step = 2000000;
    Report rep;
    rep.rows = rows;
    rep.consistency = check_consistency(rows, 1e-4);
    build_projection(rep, {named_link("pcie"), named_link("eth10")});
    REQUIRE(rep.has_model);
    REQUIRE(rep.variants.size() == 2);
    CHECK(rep.variants[1].label == "ddp-bf16");
    CHECK(rep.variants[1].model.wire_scale == doctest::Approx(0.5));
    const Projection& p16 = rep.variants[0].sets[1].points[6];  // eth10, N = 64
    const Projection& pbf = rep.variants[1].sets[1].points[6];
    CHECK(p16.devices == 64);
    CHECK(pbf.allreduce_s == doctest::Approx(ring_allreduce_seconds(64, 2e6, named_link("eth10"))));
    CHECK(p16.allreduce_s == doctest::Approx(ring_allreduce_seconds(64, 4e6, named_link("eth10"))));
    CHECK(pbf.step_s < p16.step_s);
    const std::string proj = format_projection(rep);
    CHECK(proj.find("## Projection by DDP variant on eth10") != std::string::npos);
    CHECK(proj.find("| ddp-bf16 | 50.0% | 1 |") != std::string::npos);
    const std::string table = format_table(rep);
    CHECK(table.find("opt state MiB") != std::string::npos);
    CHECK(table.find("grad MB/step") != std::string::npos);
    CHECK(table.find("| 3.000 / 6.000 |") != std::string::npos);  // ddp's optimizer state
    CHECK(table.find("ddp-bf16 1e-02 (bf16 gradients)") != std::string::npos);
    nlohmann::json j = report_json(rep);
    CHECK(j["variant_projection"].size() == 2 * 2 * 7);
    CHECK(j["rows"][1]["loss_tolerance"].get<double>() == doctest::Approx(1e-2));
    CHECK(j["rows"][0]["optimizer_state_mib"].get<double>() == doctest::Approx(3.0));
  }

  TEST_CASE("a row survives the JSON round trip") {
    RunResult r = row("ddp", 2, 0.04, {2.3, 2.2});
    r.breakdown.forward = 0.01;
    r.breakdown.dp_reduce = 0.002;
    r.bucket_bytes = {10, 20};
    r.comm_s = 0.003;
    r.sweep_bytes = {1e6, 2e6};
    r.sweep_s = {1e-3, 2e-3};
    r.peak_memory_bytes = 3 << 20;
    r.compute_batch = 64;
    r.compute_step_s = 0.03;
    r.grad_bytes_per_step = 15;
    r.collectives_per_step = 3;
    r.broadcasts_per_step = 2;
    r.buffer_bytes = 1000;
    r.messages_per_bucket = 2;
    r.zero_broadcast_bytes = 40;
    r.zero_broadcasts = 2;
    r.optimizer_state_bytes = 1 << 20;
    r.breakdown.ddp_broadcast = 0.001;
    RunResult back = run_result_from_json(to_json(r));
    CHECK(back.grad_bytes_per_step == 15);
    CHECK(back.collectives_per_step == 3);
    CHECK(back.broadcasts_per_step == 2);
    CHECK(back.buffer_bytes == 1000);
    CHECK(back.messages_per_bucket == 2);
    CHECK(back.zero_broadcast_bytes == 40);
    CHECK(back.zero_broadcasts == 2);
    CHECK(back.optimizer_state_bytes == 1 << 20);
    CHECK(back.breakdown.ddp_broadcast == doctest::Approx(0.001));
    CHECK(back.mode == "ddp");
    CHECK(back.step_s.size() == 3);
    CHECK(back.step_s[2] == doctest::Approx(0.06));
    CHECK(back.losses == r.losses);
    CHECK(back.breakdown.forward == doctest::Approx(0.01));
    CHECK(back.breakdown.dp_reduce == doctest::Approx(0.002));
    CHECK(back.bucket_bytes == r.bucket_bytes);
    CHECK(back.sweep_s[1] == doctest::Approx(2e-3));
    CHECK(back.peak_memory_bytes == r.peak_memory_bytes);
    CHECK(back.compute_step_s == doctest::Approx(0.03));
    CHECK(back.samples_per_s() == doctest::Approx(r.samples_per_s()));
    CHECK(back.step_p(0.5) == doctest::Approx(0.04));
    CHECK(back.step_p(1.0) == doctest::Approx(0.06));
  }
}
