// minidl-compare's consistency check, table, explanations, projection and JSON (see
// report.h; the plot is in plot.cpp).
#include "apps/compare/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "tensor/error.h"

namespace minidl::compare {

namespace {

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

// Relative loss tolerance of rows that normalise per-replica batches (see set_row_tolerance).
constexpr double kBatchNormTolerance = 1e-2;
// ... of rows whose comm hook rounds or compresses the gradients (see set_row_tolerance).
constexpr double kFp16Tolerance = 1e-3, kBf16Tolerance = 1e-2, kPowerSGDTolerance = 5e-2;

// Rows that do not compute exactly the single device's function get their own loss-check
// tolerance: resnet-mini's BatchNorm normalises each dp replica's / ddp rank's share of the
// batch, not the global batch (their losses differ from single's by ~5e-4 over 23 steps).
// Comm hooks round the gradients (fp16, bf16) or approximate them (PowerSGD), so their losses
// drift from the exact modes' by a little.
void set_row_tolerance(RunResult& r, const std::string& model) {
  if (model == "resnet-mini" &&
      (r.mode == "dp" || (is_multiprocess_mode(r.mode) && r.mode != "ddp-syncbn"))) {
    r.tolerance = kBatchNormTolerance;
    r.tolerance_reason = "per-replica BatchNorm statistics";
  }
  const std::pair<const char*, double> hooks[] = {{"ddp-fp16", kFp16Tolerance},
                                                  {"ddp-bf16", kBf16Tolerance},
                                                  {"ddp-powersgd", kPowerSGDTolerance}};
  for (const auto& [mode, tol] : hooks)
    if (r.mode == mode && tol > r.tolerance) {
      r.tolerance = tol;
      r.tolerance_reason = std::string(mode + 4) + " gradients";
    }
}

double Report::speedup(const RunResult& r) const {
  const double base = rows.empty() ? 0 : rows[0].samples_per_s();
  return base > 0 ? r.samples_per_s() / base : 0;
}

double Report::efficiency(const RunResult& r) const {
  const int resources = r.mode == "single" ? std::max(r.threads, 1) : std::max(r.devices, 1);
  return speedup(r) / double(resources);
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

std::string format_table(const Report& rep) {
  std::ostringstream o;
  o << "## " << rep.title << "\n\n";
  o << "| mode | devices | threads | samples/s | step ms p50 | p90 | speedup | efficiency | "
       "peak MiB/device | state MiB | opt state MiB max rank / all | forward | backward | comm "
       "exposed | "
       "comm hidden | "
       "optimizer | "
       "data wait | dp replicate | dp scatter | dp gather | dp reduce | ddp broadcast | "
       "collectives/step | MB/step | grad MB/step |\n";
  o << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
       "---:|---:|---:|---:|---:|---:|---:|\n";
  for (const RunResult& r : rep.rows) {
    const Breakdown& b = r.breakdown;
    const bool ddp = is_ddp_mode(r.mode), dp = r.mode == "dp";
    const bool ranks = is_multiprocess_mode(r.mode);  // ddp and fsdp: collectives counted
    auto ms = [](double s) { return fmt("%.2f", s * 1e3); };
    o << "| " << r.label << " | " << r.devices << " | " << r.threads << " | "
      << fmt("%.0f", r.samples_per_s()) << " | " << ms(r.step_p(0.5)) << " | " << ms(r.step_p(0.9))
      << " | " << fmt("%.2fx", rep.speedup(r)) << " | " << fmt("%.0f%%", 100 * rep.efficiency(r))
      << " | " << fmt("%.1f", double(r.peak_memory_bytes) / (1 << 20)) << " | "
      << fmt("%.3f", double(r.state_bytes) / (1 << 20)) << " | "
      << fmt("%.3f", double(r.optimizer_state_bytes) / (1 << 20)) << " / "
      << fmt("%.3f", double(r.optimizer_state_total) / (1 << 20)) << " | " << ms(b.forward) << " | "
      << ms(b.backward) << " | " << (ranks ? ms(b.reduce_exposed) : "-") << " | "
      << (ddp ? ms(b.reduce_hidden) : "-") << " | " << ms(b.optimizer) << " | " << ms(b.data_wait)
      << " | " << (dp ? ms(b.dp_replicate) : "-") << " | " << (dp ? ms(b.dp_scatter) : "-") << " | "
      << (dp ? ms(b.dp_gather) : "-") << " | " << (dp ? ms(b.dp_reduce) : "-") << " | "
      << (ddp ? ms(b.ddp_broadcast) : "-") << " | "
      << (ranks ? fmt("%.1f", r.collectives_per_step) : "-") << " | "
      << (ranks ? fmt("%.3f", r.payload_bytes_per_step / 1e6) : "-") << " | "
      << (ddp ? fmt("%.3f", double(r.grad_bytes_per_step) / 1e6) : "-") << " |\n";
  }
  o << "\nBreakdown columns: ms per step; forward/backward exclude the DP and DDP work shown in "
       "their own columns (ddp broadcast: the forwards' buffer broadcasts; comm exposed: DDP's "
       "allreduce not hidden behind backward, FSDP's waits on all-gathers and reduce-scatters; "
       "comm hidden: DDP's allreduce that overlapped). Collectives/step and "
       "MB/step: what rank 0 issued per measured step (ProcessGroup::collective_counts(), "
       "payload before the ring's 2(N-1)/N); grad MB/step: the gradient payload "
       "(DDPStats::bytes_per_step, compressed by a comm hook). State: parameters + gradients + "
       "optimizer state held by the largest rank (fsdp: its shards). Opt state: the largest rank's "
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
    } else if (is_fsdp_mode(r.mode)) {
      const RunResult* ref = nullptr;
      for (const RunResult& q : rep.rows)
        if (q.mode == "ddp" && !ref) ref = &q;
      std::string line = r.label + " issues " + fmt("%.1f", r.collectives_per_step) +
                         " collectives per step (all-gathers of each unit's parameters, "
                         "reduce-scatters of its gradients; " +
                         fmt("%.3f", r.payload_bytes_per_step / 1e6) + " MB) and holds " +
                         fmt("%.3f", double(r.state_bytes) / (1 << 20)) + " MiB of state per rank";
      if (ref && ref->state_bytes > 0)
        line += ", " + fmt("%.2fx", double(r.state_bytes) / double(ref->state_bytes)) +
                " of ddp's; its step takes " + fmt("%.2fx", mean_step(r) / mean_step(*ref)) +
                " ddp's";
      const Breakdown& b = r.breakdown;
      line += "; compute (forward + backward less the waits) takes " +
              fmt("%.1f", (b.forward + b.backward) * 1e3) + " ms and the exposed communication " +
              "(waits on its all-gathers and reduce-scatters) " +
              fmt("%.1f", b.reduce_exposed * 1e3) + " ms, " +
              fmt("%.0f%%", 100 * b.reduce_exposed / step) + " of its step";
      lines.push_back(line + ".");
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

}  // namespace minidl::compare
