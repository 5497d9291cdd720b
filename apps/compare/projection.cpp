// minidl-compare's cost-model part of the report: each DDP row's StepModel, the projection of the
// ddp row (fitted local link and named links) and of every DDP variant on the named links, and
// its text (see report.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "apps/compare/report.h"

namespace minidl::compare {

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

}  // namespace minidl::compare
