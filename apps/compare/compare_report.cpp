// minidl-compare's consistency check, table, explanations, projection and JSON (see
// compare_report.h; the plot is in compare_plot.cpp).
#include "apps/compare/compare_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "tensor/error.h"

namespace minidl::compare {

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

double mean_step(const RunResult& r) {
  return r.samples_per_s() > 0 ? double(r.global_batch) / r.samples_per_s() : 0;
}

}  // namespace

Consistency check_consistency(const std::vector<RunResult>& rows, double tolerance) {
  Consistency c;
  c.tolerance = tolerance;
  if (rows.empty()) return c;
  const RunResult& ref = rows[0];
  c.reference = ref.label;
  c.steps = int64_t(ref.losses.size());
  for (size_t k = 1; k < rows.size(); ++k) {
    const RunResult& r = rows[k];
    if (r.losses.size() != ref.losses.size()) {
      c.error = "modes " + ref.label + " and " + r.label + " ran different numbers of steps (" +
                std::to_string(ref.losses.size()) + " vs " + std::to_string(r.losses.size()) + ")";
      return c;
    }
    const bool loose = r.tolerance > 0;
    const double tol = loose ? r.tolerance : tolerance;
    for (size_t s = 0; s < r.losses.size(); ++s) {
      const double a = ref.losses[s], b = r.losses[s];
      const double rel = std::fabs(a - b) / std::max(std::fabs(a), 1e-12);
      if (!(rel <= tol)) {  // NaN fails too
        char buf[400];
        std::snprintf(buf, sizeof(buf),
                      "modes %s and %s disagree at step %zu: loss %.6g vs %.6g (relative "
                      "difference %.2g > tolerance %.2g%s%s); they do not compute the same thing",
                      ref.label.c_str(), r.label.c_str(), s, a, b, rel, tol, loose ? " for " : "",
                      loose ? r.tolerance_reason.c_str() : "");
        c.error = buf;
        c.max_rel_diff = rel;
        return c;
      }
      if (loose)
        c.loose_max_rel_diff = std::max(c.loose_max_rel_diff, rel);
      else
        c.max_rel_diff = std::max(c.max_rel_diff, rel);
    }
  }
  return c;
}

double Report::speedup(const RunResult& r) const {
  const double base = rows.empty() ? 0 : rows[0].samples_per_s();
  return base > 0 ? r.samples_per_s() / base : 0;
}

double Report::efficiency(const RunResult& r) const {
  const int resources = r.mode == "single" ? std::max(r.threads, 1) : std::max(r.devices, 1);
  return speedup(r) / double(resources);
}

StepModel step_model_of(const RunResult& r) {
  StepModel m;
  const Breakdown& b = r.breakdown;
  m.compute_s = b.forward + b.backward + b.optimizer + b.data_wait;
  m.backward_s = b.backward;
  m.bucket_bytes = r.bucket_bytes;
  m.hidden_fraction = r.hidden_fraction;
  m.per_rank_batch = r.per_rank_batch;
  int64_t bucket_total = 0;
  for (int64_t x : r.bucket_bytes) bucket_total += x;
  if (bucket_total > 0 && r.grad_bytes_per_step > 0)
    m.wire_scale = double(r.grad_bytes_per_step) / double(bucket_total);
  m.messages_per_bucket = std::max(r.messages_per_bucket, 1);
  m.broadcast_bytes = r.broadcasts_per_step > 0 ? r.buffer_bytes : 0;
  m.broadcasts = r.broadcasts_per_step;
  m.after_step_bytes = r.zero_broadcast_bytes;
  m.after_step_per_rank = double(r.zero_broadcasts) / double(std::max(r.devices, 1));
  return m;
}

void build_projection(Report& rep, const std::vector<Link>& links) {
  const RunResult* single = nullptr;
  const RunResult* ddp = nullptr;
  std::vector<const RunResult*> family;
  for (const RunResult& r : rep.rows) {
    if (r.mode == "single" && r.compute_batch > 0 && !single) single = &r;
    if (is_ddp_mode(r.mode) && r.devices >= 2) family.push_back(&r);
  }
  for (const RunResult* r : family)
    if (r->sweep_bytes.size() >= 2 && (!ddp || (r->mode == "ddp" && ddp->mode != "ddp"))) ddp = r;
  if (!ddp) return;
  rep.has_model = true;
  rep.model = step_model_of(*ddp);
  rep.model.single_s = single ? single->compute_step_s : 0;
  rep.has_single = single != nullptr;
  if (single) rep.model.per_rank_batch = single->compute_batch;
  rep.measured_devices = ddp->devices;
  rep.measured_step_s = ddp->step_p(0.5);
  const std::vector<int> ns = {1, 2, 4, 8, 16, 32, 64};
  rep.projections.clear();
  try {  // a burst of other work during the sweep can leave nothing to fit: named links only
    rep.local = fit_link(ddp->devices, ddp->sweep_bytes, ddp->sweep_s);
    rep.has_local = true;
    rep.predicted_step_s = project_step(rep.model, ddp->devices, rep.local).step_s;
    rep.projections.push_back({rep.local, project(rep.model, ns, rep.local)});
  } catch (const std::exception& e) {
    rep.has_local = false;
    rep.local_error = e.what();
    rep.predicted_step_s = 0;
  }
  // Named links join separate devices, which do not share this machine's cores: their ranks
  // compute like one device alone (T_c = T_1, the backward scaled alike).
  StepModel separate = rep.model;
  // The shared-core slowdown of a rank against one device alone (1 without a single row).
  const double alone = separate.single_s > 0 && separate.compute_s > separate.single_s
                           ? separate.single_s / separate.compute_s
                           : 1.0;
  separate.backward_s *= alone;
  separate.compute_s *= alone;
  // Without a single row T_1 is the plain DDP rank's compute (the variants' common base).
  if (separate.single_s <= 0) separate.single_s = separate.compute_s;
  for (const Link& l : links) rep.projections.push_back({l, project(separate, ns, l)});
  // Every ddp-family row on the named links, with its own bytes and compute scaled alike.
  rep.variants.clear();
  if (family.size() < 2) return;
  for (const RunResult* r : family) {
    VariantProjection v;
    v.label = r->label;
    v.measured_compute_s = step_model_of(*r).compute_s;
    v.model = step_model_of(*r);
    // The plain DDP row's compute, backward and overlap for every variant: on a shared machine
    // those differ between rows by more than the variants change them (a hook's casts, ZeRO's
    // shard), so only what each sends (and when) sets them apart.
    v.model.compute_s = separate.compute_s;
    v.model.backward_s = separate.backward_s;
    v.model.hidden_fraction = separate.hidden_fraction;
    v.model.single_s = separate.single_s;
    v.model.per_rank_batch = rep.model.per_rank_batch;
    for (const Link& l : links) v.sets.push_back({l, project(v.model, ns, l)});
    rep.variants.push_back(std::move(v));
  }
}

std::string format_table(const Report& rep) {
  std::ostringstream o;
  o << "## " << rep.title << "\n\n";
  o << "| mode | devices | threads | samples/s | step ms p50 | p90 | speedup | efficiency | "
       "peak MiB/device | opt state MiB max rank / all | forward | backward | reduce exposed | "
       "reduce hidden | "
       "optimizer | "
       "data wait | dp replicate | dp scatter | dp gather | dp reduce | ddp broadcast | "
       "collectives/step | MB/step | grad MB/step |\n";
  o << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
       "---:|---:|---:|---:|---:|---:|\n";
  for (const RunResult& r : rep.rows) {
    const Breakdown& b = r.breakdown;
    const bool ddp = is_ddp_mode(r.mode), dp = r.mode == "dp";
    auto ms = [](double s) { return fmt("%.2f", s * 1e3); };
    o << "| " << r.label << " | " << r.devices << " | " << r.threads << " | "
      << fmt("%.0f", r.samples_per_s()) << " | " << ms(r.step_p(0.5)) << " | " << ms(r.step_p(0.9))
      << " | " << fmt("%.2fx", rep.speedup(r)) << " | " << fmt("%.0f%%", 100 * rep.efficiency(r))
      << " | " << fmt("%.1f", double(r.peak_memory_bytes) / (1 << 20)) << " | "
      << fmt("%.3f", double(r.optimizer_state_bytes) / (1 << 20)) << " / "
      << fmt("%.3f", double(r.optimizer_state_total) / (1 << 20)) << " | " << ms(b.forward) << " | "
      << ms(b.backward) << " | " << (ddp ? ms(b.reduce_exposed) : "-") << " | "
      << (ddp ? ms(b.reduce_hidden) : "-") << " | " << ms(b.optimizer) << " | " << ms(b.data_wait)
      << " | " << (dp ? ms(b.dp_replicate) : "-") << " | " << (dp ? ms(b.dp_scatter) : "-") << " | "
      << (dp ? ms(b.dp_gather) : "-") << " | " << (dp ? ms(b.dp_reduce) : "-") << " | "
      << (ddp ? ms(b.ddp_broadcast) : "-") << " | "
      << (ddp ? fmt("%.1f", r.collectives_per_step) : "-") << " | "
      << (ddp ? fmt("%.3f", r.payload_bytes_per_step / 1e6) : "-") << " | "
      << (ddp ? fmt("%.3f", double(r.grad_bytes_per_step) / 1e6) : "-") << " |\n";
  }
  o << "\nBreakdown columns: ms per step; forward/backward exclude the DP and DDP work shown in "
       "their own columns (ddp broadcast: the forwards' buffer broadcasts). Collectives/step and "
       "MB/step: what rank 0 issued per measured step (ProcessGroup::collective_counts(), "
       "payload before the ring's 2(N-1)/N); grad MB/step: the gradient payload "
       "(DDPStats::bytes_per_step, compressed by a comm hook). Opt state: the largest rank's "
       "optimizer state (ddp-zero1: its shard; ZeRO-1 places whole tensors, so one large tensor "
       "bounds it) and the sum over ranks. Speedup: samples/s against the first row; "
       "efficiency: "
       "speedup per "
       "device (single rows: per thread). Loss check: "
    << rep.consistency.steps << " steps, largest relative difference to "
    << rep.consistency.reference << " " << fmt("%.1e", rep.consistency.max_rel_diff)
    << " (tolerance " << fmt("%.0e", rep.consistency.tolerance) << ")";
  std::string loose;
  for (const RunResult& r : rep.rows)
    if (r.tolerance > 0)
      loose += (loose.empty() ? "" : ", ") + r.label + " " + fmt("%.0e", r.tolerance) + " (" +
               r.tolerance_reason + ")";
  if (!loose.empty())
    o << "; own tolerance: " << loose << ", largest difference "
      << fmt("%.1e", rep.consistency.loose_max_rel_diff);
  o << ".";
  if (!rep.rows.empty() && rep.rows[0].round_samples_per_s.size() > 1) {
    o << " Each row: the median of " << rep.rows[0].round_samples_per_s.size()
      << " rounds by samples/s (range:";
    for (const RunResult& r : rep.rows)
      o << " " << r.label << " " << fmt("%.0f", r.round_samples_per_s.front()) << "-"
        << fmt("%.0f", r.round_samples_per_s.back()) << (&r == &rep.rows.back() ? ")." : ",");
  }
  for (const RunResult& r : rep.rows)
    if (r.mode == "dp" && r.device == "cpu") {
      o << " CPU dp: the replicas share the cpu memory counter, so its peak is theirs together.";
      break;
    }
  o << "\n";
  return o.str();
}

std::vector<std::string> explain(const Report& rep) {
  std::vector<std::string> lines;
  const RunResult* best = nullptr;
  for (const RunResult& r : rep.rows) {
    const double step = mean_step(r);
    if (step <= 0) continue;
    if (!best || r.samples_per_s() > best->samples_per_s()) best = &r;
    const Breakdown& b = r.breakdown;
    if (r.mode == "dp") {
      const double sync = b.dp_replicate, moves = b.dp_scatter + b.dp_gather, red = b.dp_reduce;
      lines.push_back(r.label + " spends " + fmt("%.0f%%", 100 * sync / step) +
                      " of its step re-synchronising replicas, " +
                      fmt("%.0f%%", 100 * moves / step) + " scattering inputs and gathering " +
                      "outputs and " + fmt("%.0f%%", 100 * red / step) +
                      " summing replica gradients; backward takes " +
                      fmt("%.0f%%", 100 * b.backward / step) + ".");
    } else if (is_ddp_mode(r.mode)) {
      int64_t bytes = 0;
      for (int64_t x : r.bucket_bytes) bytes += x;
      lines.push_back(r.label + " hides " + fmt("%.0f%%", 100 * r.hidden_fraction) +
                      " of its allreduce (" + fmt("%.1f", r.comm_s * 1e3) + " ms per step, " +
                      std::to_string(r.bucket_bytes.size()) + " bucket(s), " +
                      fmt("%.1f", double(bytes) / 1e6) + " MB) behind backward; the exposed " +
                      fmt("%.1f", r.exposed_s * 1e3) + " ms is " +
                      fmt("%.0f%%", 100 * r.exposed_s / step) + " of its step.");
      if (b.ddp_broadcast > 0)
        lines.push_back(r.label + " spends " + fmt("%.2f", b.ddp_broadcast * 1e3) + " ms (" +
                        fmt("%.1f%%", 100 * b.ddp_broadcast / step) +
                        " of its step) broadcasting rank 0's buffers before each forward; it "
                        "issues " +
                        fmt("%.1f", r.collectives_per_step) + " collectives per step.");
    } else if (r.mode == "single" && r.threads > 1) {
      lines.push_back(r.label + " (one process, " + std::to_string(r.threads) +
                      " intra-op threads) reaches " + fmt("%.2fx", rep.speedup(r)) +
                      " of one thread: " + fmt("%.0f%%", 100 * rep.efficiency(r)) +
                      " efficiency per thread.");
    }
  }
  if (best && best == &rep.rows[0] && rep.rows.size() > 1)
    lines.push_back("No mode beat " + best->label + " on this machine (the next best reaches " +
                    [&] {
                      double s = 0;
                      for (size_t i = 1; i < rep.rows.size(); ++i)
                        s = std::max(s, rep.speedup(rep.rows[i]));
                      return fmt("%.2fx", s);
                    }() +
                    "); are the cores shared with other work?");
  else if (best && rep.rows.size() > 1)
    lines.push_back("Fastest: " + best->label + " at " + fmt("%.2fx", rep.speedup(*best)) +
                    " the throughput of " + rep.rows[0].label + " (" +
                    fmt("%.0f%%", 100 * rep.efficiency(*best)) + " scaling efficiency).");
  const RunResult* ddp = nullptr;
  for (const RunResult& r : rep.rows)
    if (is_ddp_mode(r.mode) && r.devices == rep.measured_devices && !ddp) ddp = &r;
  if (rep.has_model && ddp) {
    // Compute of one DDP rank (its step without the exposed allreduce) against one device alone.
    const double ratio = rep.model.single_s > 0 ? rep.model.compute_s / rep.model.single_s : 1.0;
    if (ratio > 1.1)
      lines.push_back("Each DDP rank computed " + fmt("%.2fx", ratio) + " slower than one " +
                      "process alone (" + fmt("%.1f", rep.model.compute_s * 1e3) + " vs " +
                      fmt("%.1f", rep.model.single_s * 1e3) + " ms): its " +
                      std::to_string(ddp->devices) + " processes shared the cores (" +
                      std::to_string(rep.cores) + " here, load average " + rep.load_before +
                      " before the runs, " + rep.load_after + " after).");
  }
  if (rep.has_model && !rep.has_local)
    lines.push_back("Cost model: no local link could be fitted (" + rep.local_error +
                    "), so the 2-process step is not predicted; named links only.");
  if (rep.has_model && rep.has_local) {
    const double err = rep.predicted_step_s / rep.measured_step_s - 1;
    lines.push_back("Cost model: the " + std::to_string(rep.measured_devices) +
                    "-process step predicted from the ranks' compute and the fitted link's "
                    "allreduce is " +
                    fmt("%.2f", rep.predicted_step_s * 1e3) + " ms, measured " +
                    fmt("%.2f", rep.measured_step_s * 1e3) + " ms (" + fmt("%+.0f%%", 100 * err) +
                    ").");
  }
  return lines;
}

std::string format_projection(const Report& rep) {
  if (!rep.has_model) return "";
  std::ostringstream o;
  const StepModel& m = rep.model;
  int64_t bytes = 0;
  for (int64_t b : m.bucket_bytes) bytes += b;
  o << "## Projection: DDP step and speedup on N devices (weak scaling, " << m.per_rank_batch
    << " samples per device)\n\n";
  o << "Model: step(N) = T_c + T_ar(N) - min(h T_ar(N), T_bw), T_ar = sum over buckets of "
       "2(N-1)/N bytes/bandwidth + 2(N-1) latency; T_c = "
    << fmt("%.2f", m.compute_s * 1e3) << " ms and T_bw = " << fmt("%.2f", m.backward_s * 1e3)
    << " ms (a DDP rank's compute and backward, measured), T_1 = "
    << fmt("%.2f", (rep.has_single ? m.single_s : m.compute_s) * 1e3)
    << (rep.has_single ? " ms (one device alone" : " ms (no single row: T_c")
    << ": the N = 1 step; speedup = N T_1 / step), " << m.bucket_bytes.size() << " bucket(s), "
    << fmt("%.2f", double(bytes) / 1e6) << " MB, h = " << fmt("%.0f%%", 100 * m.hidden_fraction)
    << " (measured). Fitted local link: "
    << (rep.has_local ? rep.local.describe() : "none (" + rep.local_error + ")") << ".\n\n";
  o << "| N |";
  for (const auto& p : rep.projections) o << " " << p.link.name << " step ms | speedup |";
  o << "\n|---:|";
  for (size_t i = 0; i < rep.projections.size(); ++i) o << "---:|---:|";
  o << "\n";
  const size_t rows = rep.projections.empty() ? 0 : rep.projections[0].points.size();
  for (size_t i = 0; i < rows; ++i) {
    o << "| " << rep.projections[0].points[i].devices << " |";
    for (const auto& p : rep.projections)
      o << " " << fmt("%.2f", p.points[i].step_s * 1e3) << " | "
        << fmt("%.2fx", p.points[i].speedup) << " |";
    o << "\n";
  }
  o << "\nMeasured here: " << rep.measured_devices << " processes, step "
    << fmt("%.2f", rep.measured_step_s * 1e3) << " ms";
  if (rep.has_local)
    o << "; the model with the fitted link predicts " << fmt("%.2f", rep.predicted_step_s * 1e3)
      << " ms (" << fmt("%+.1f%%", 100 * (rep.predicted_step_s / rep.measured_step_s - 1))
      << ").\n";
  else
    o << "; no fitted link to predict it.\n";
  o << "Named links are assumptions (nvlink 150 GB/s 5 us, pcie 12 GB/s 10 us, ib100 10 GB/s "
       "5 us, eth10 1.1 GB/s 50 us) between separate devices, each computing like one device "
       "alone here (T_c = T_1 = "
    << fmt("%.2f", (rep.has_single ? m.single_s : m.compute_s) * 1e3)
    << " ms, T_bw scaled alike); the fitted local link keeps this machine's shared-core T_c.";
  if (m.broadcasts > 0)
    o << " Exposed as well: " << fmt("%.1f", m.broadcasts) << " buffer broadcast(s) per step of "
      << fmt("%.3f", double(m.broadcast_bytes) / 1e6)
      << " MB (a tree: ceil(log2 N) latencies each + bytes/bandwidth).";
  o << "\n";
  if (rep.variants.empty()) return o.str();
  // The DDP variants on the slowest named link: what their bytes on the wire buy there.
  size_t slow = 0;
  for (size_t i = 1; i < rep.variants[0].sets.size(); ++i)
    if (rep.variants[0].sets[i].link.bandwidth_Bps < rep.variants[0].sets[slow].link.bandwidth_Bps)
      slow = i;
  if (rep.variants[0].sets.empty()) return o.str();
  o << "\n## Projection by DDP variant on " << rep.variants[0].sets[slow].link.describe()
    << "\n\nThe ddp row's T_c, T_bw and h for every variant (the rows' own measured T_c, shown, "
       "differ on a shared machine by more than a hook's casts or ZeRO's shard change them); "
       "each row's bytes on the wire per bucket (a comm hook's payload / the bucket's), "
       "collectives per bucket (PowerSGD: P, Q and the uncompressed rest), buffer broadcasts "
       "and ZeRO-1's parameter broadcasts after the step (exposed).\n\n| variant | wire bytes | "
       "msgs/bucket | measured T_c ms |";
  for (const auto& p : rep.variants[0].sets[slow].points)
    if (p.devices > 1) o << " N=" << p.devices << " step ms | speedup |";
  o << "\n|---|---:|---:|---:|";
  for (const auto& p : rep.variants[0].sets[slow].points)
    if (p.devices > 1) o << "---:|---:|";
  o << "\n";
  for (const VariantProjection& v : rep.variants) {
    o << "| " << v.label << " | " << fmt("%.1f%%", 100 * v.model.wire_scale) << " | "
      << v.model.messages_per_bucket << " | " << fmt("%.2f", v.measured_compute_s * 1e3) << " |";
    for (const auto& p : v.sets[slow].points)
      if (p.devices > 1)
        o << " " << fmt("%.2f", p.step_s * 1e3) << " | " << fmt("%.2fx", p.speedup) << " |";
    o << "\n";
  }
  return o.str();
}

nlohmann::json report_json(const Report& rep) {
  nlohmann::json rows = nlohmann::json::array();
  for (const RunResult& r : rep.rows) {
    nlohmann::json j = to_json(r);
    j["samples_per_s_rounds"] = r.round_samples_per_s;
    j["speedup"] = rep.speedup(r);
    j["efficiency"] = rep.efficiency(r);
    j["loss_tolerance"] = r.tolerance > 0 ? r.tolerance : rep.consistency.tolerance;
    j["loss_tolerance_reason"] = r.tolerance_reason;
    rows.push_back(std::move(j));
  }
  nlohmann::json proj = nlohmann::json::array();
  for (const auto& p : rep.projections)
    for (const Projection& q : p.points)
      proj.push_back({{"link", p.link.name},
                      {"bandwidth_GBps", p.link.bandwidth_Bps / 1e9},
                      {"latency_us", p.link.latency_s * 1e6},
                      {"devices", q.devices},
                      {"step_ms", q.step_s * 1e3},
                      {"allreduce_ms", q.allreduce_s * 1e3},
                      {"broadcast_ms", q.broadcast_s * 1e3},
                      {"exposed_ms", q.exposed_s * 1e3},
                      {"samples_per_s", q.samples_per_s},
                      {"speedup", q.speedup},
                      {"efficiency", q.efficiency}});
  nlohmann::json variants = nlohmann::json::array();
  for (const VariantProjection& v : rep.variants)
    for (const auto& set : v.sets)
      for (const Projection& q : set.points)
        variants.push_back({{"mode", v.label},
                            {"link", set.link.name},
                            {"devices", q.devices},
                            {"wire_scale", v.model.wire_scale},
                            {"compute_ms", v.model.compute_s * 1e3},
                            {"measured_compute_ms", v.measured_compute_s * 1e3},
                            {"messages_per_bucket", v.model.messages_per_bucket},
                            {"step_ms", q.step_s * 1e3},
                            {"allreduce_ms", q.allreduce_s * 1e3},
                            {"broadcast_ms", q.broadcast_s * 1e3},
                            {"exposed_ms", q.exposed_s * 1e3},
                            {"samples_per_s", q.samples_per_s},
                            {"speedup", q.speedup},
                            {"efficiency", q.efficiency}});
  nlohmann::json out = {
      {"title", rep.title},
      {"rows", rows},
      {"projection", proj},
      {"variant_projection", variants},
      {"consistency",
       {{"ok", rep.consistency.error.empty()},
        {"reference", rep.consistency.reference},
        {"steps", rep.consistency.steps},
        {"tolerance", rep.consistency.tolerance},
        {"max_rel_diff", rep.consistency.max_rel_diff},
        {"loose_max_rel_diff", rep.consistency.loose_max_rel_diff},
        {"error", rep.consistency.error}}},
      {"explanation", explain(rep)},
      {"cores", rep.cores},
      {"load_average", {rep.load_before, rep.load_after}},
  };
  if (rep.has_model)
    out["model"] = {
        {"compute_ms", rep.model.compute_s * 1e3},
        {"single_ms", rep.model.single_s * 1e3},
        {"backward_ms", rep.model.backward_s * 1e3},
        {"bucket_bytes", rep.model.bucket_bytes},
        {"hidden_fraction", rep.model.hidden_fraction},
        {"per_rank_batch", rep.model.per_rank_batch},
        {"local_bandwidth_GBps",
         rep.has_local ? nlohmann::json(rep.local.bandwidth_Bps / 1e9) : nlohmann::json()},
        {"local_latency_us",
         rep.has_local ? nlohmann::json(rep.local.latency_s * 1e6) : nlohmann::json()},
        {"local_error", rep.local_error},
        {"measured_devices", rep.measured_devices},
        {"measured_step_ms", rep.measured_step_s * 1e3},
        {"predicted_step_ms",
         rep.has_local ? nlohmann::json(rep.predicted_step_s * 1e3) : nlohmann::json()}};
  return out;
}

}  // namespace minidl::compare
