// minidl-compare's JSON: a mode's row between the worker and the parent (to_json,
// run_result_from_json) and the parent's whole report (report_json), and the --help footer that
// lists the modes and those fields.
#include <nlohmann/json.hpp>

#include <utility>

#include "apps/compare/report.h"
#include "apps/compare/run.h"

namespace minidl::compare {

namespace {

const char* const kHelpFooter =
    R"HELP(Modes (same model, data, initial weights and global batch in each):
  single  one device (on CPU: one thread; a reference row "single (N threads)" uses all cores)
  dp      DataParallel, --devices replicas in one process (CPU: each replica's forward on its
          own thread with 1 intra-op thread; backward and optimizer with --dp-threads)
  ddp     DistributedDataParallel, --devices processes through the launcher (1 thread each)
  ddp-zero1, ddp-fp16, ddp-bf16, ddp-powersgd, ddp-syncbn
          ddp with a ZeroRedundancyOptimizer, an fp16/bf16/PowerSGD comm hook (rank
          --powersgd-rank from the third step), or SyncBatchNorm (--model resnet-mini); rows that
          round or approximate (hooks, per-replica BatchNorm) get their own loss tolerance
  fsdp, fsdp-grad-op
          FullyShardedDataParallel over --devices processes: FULL_SHARD (ZeRO-3) or
          SHARD_GRAD_OP (ZeRO-2); units: mnist's layers, the GPT's blocks
Every mode first runs --warmup steps, then --steps timed steps, in --rounds rounds. The losses of every step must
agree with the first row's within --tolerance (relative), else the run fails naming the modes.
MINIDL_COMPARE_BREAK=dp (a comma list of modes) is a test hook that breaks those modes' gradients.

JSON (--json): {"title", "rows": [{mode, label, device, devices, threads, global_batch,
  per_rank_batch, samples_per_s, samples_per_s_rounds[], step_ms_p50, step_ms_p90, step_ms[], losses[], speedup,
  efficiency, loss_tolerance, loss_tolerance_reason, peak_memory_mib, state_mib, optimizer_state_mib,
  optimizer_state_total_mib, breakdown: {forward_ms, backward_ms, reduce_exposed_ms,
  reduce_hidden_ms, optimizer_ms, data_wait_ms, dp_replicate_ms, dp_scatter_ms, dp_gather_ms,
  dp_reduce_ms, ddp_broadcast_ms}, ddp: {bucket_bytes[], comm_ms, exposed_ms, hidden_fraction,
  grad_bytes_per_step, collectives_per_step, payload_bytes_per_step, messages_per_bucket,
  buffer_bytes, buffer_broadcasts_per_step, zero_broadcast_bytes_per_step,
  zero_broadcasts_per_step, allreduce_sweep_bytes[], allreduce_sweep_ms[]}, compute: {batch,
  step_ms, backward_ms}}],
  "projection": [{link, bandwidth_GBps, latency_us, devices, step_ms, allreduce_ms, broadcast_ms,
  exposed_ms, samples_per_s, speedup, efficiency}], "variant_projection": [{mode, link, devices,
  wire_scale, compute_ms, step_ms, allreduce_ms, broadcast_ms, exposed_ms, samples_per_s, speedup,
  efficiency}] (with 2+ DDP rows), "model": {compute_ms, single_ms, backward_ms, bucket_bytes,
  hidden_fraction, per_rank_batch, local_bandwidth_GBps, local_latency_us, local_error,
  measured_devices, measured_step_ms, predicted_step_ms (null without a fitted link)}, "consistency": {ok, reference, steps, tolerance,
  max_rel_diff, loose_max_rel_diff, error}, "explanation": [lines], "cores", "load_average": [before, after]}
Projection: step(N) = T_c + T_ar(N) - min(h T_ar(N), T_bw), ring T_ar = 2(N-1)/N bytes/bw +
  2(N-1) latency per bucket; T_c, T_bw (a DDP rank's compute and backward) and h measured in
  the ddp run, the local link fitted from allreduces timed between its ranks; step(1) = T_1, one
  device alone at the per-rank batch; speedup(N) = N T_1 / step(N) (weak scaling). Each DDP
  variant is projected with its own bytes (comm hooks), allreduces per bucket (PowerSGD: 2),
  buffer broadcasts and ZeRO-1 parameter broadcasts (exposed).)HELP";

}  // namespace

const char* help_footer() {
  return kHelpFooter;
}

nlohmann::json to_json(const RunResult& r) {
  const Breakdown& b = r.breakdown;
  const double ms = 1e3;
  return {
      {"mode", r.mode},
      {"label", r.label},
      {"device", r.device},
      {"devices", r.devices},
      {"threads", r.threads},
      {"global_batch", r.global_batch},
      {"per_rank_batch", r.per_rank_batch},
      {"samples_per_s", r.samples_per_s()},
      {"step_ms_p50", r.step_p(0.5) * ms},
      {"step_ms_p90", r.step_p(0.9) * ms},
      {"step_ms",
       [&] {  // every measured step
         std::vector<double> v;
         for (double t : r.step_s) v.push_back(t * ms);
         return v;
       }()},
      {"losses", r.losses},
      {"peak_memory_mib", double(r.peak_memory_bytes) / (1 << 20)},
      {"optimizer_state_mib", double(r.optimizer_state_bytes) / (1 << 20)},
      {"optimizer_state_total_mib", double(r.optimizer_state_total) / (1 << 20)},
      {"state_mib", double(r.state_bytes) / (1 << 20)},
      {"breakdown",
       {{"forward_ms", b.forward * ms},
        {"backward_ms", b.backward * ms},
        {"reduce_exposed_ms", b.reduce_exposed * ms},
        {"reduce_hidden_ms", b.reduce_hidden * ms},
        {"optimizer_ms", b.optimizer * ms},
        {"data_wait_ms", b.data_wait * ms},
        {"dp_replicate_ms", b.dp_replicate * ms},
        {"dp_scatter_ms", b.dp_scatter * ms},
        {"dp_gather_ms", b.dp_gather * ms},
        {"dp_reduce_ms", b.dp_reduce * ms},
        {"ddp_broadcast_ms", b.ddp_broadcast * ms}}},
      {"ddp",
       {{"bucket_bytes", r.bucket_bytes},
        {"comm_ms", r.comm_s * ms},
        {"exposed_ms", r.exposed_s * ms},
        {"hidden_fraction", r.hidden_fraction},
        {"grad_bytes_per_step", r.grad_bytes_per_step},
        {"collectives_per_step", r.collectives_per_step},
        {"payload_bytes_per_step", r.payload_bytes_per_step},
        {"messages_per_bucket", r.messages_per_bucket},
        {"buffer_bytes", r.buffer_bytes},
        {"buffer_broadcasts_per_step", r.broadcasts_per_step},
        {"zero_broadcast_bytes_per_step", r.zero_broadcast_bytes},
        {"zero_broadcasts_per_step", r.zero_broadcasts},
        {"allreduce_sweep_bytes", r.sweep_bytes},
        {"allreduce_sweep_ms",
         [&] {
           std::vector<double> v;
           for (double s : r.sweep_s) v.push_back(s * ms);
           return v;
         }()}}},
      {"compute",
       {{"batch", r.compute_batch},
        {"step_ms", r.compute_step_s * ms},
        {"backward_ms", r.compute_backward_s * ms}}},
  };
}

RunResult run_result_from_json(const nlohmann::json& j) {
  RunResult r;
  const double s = 1e-3;
  r.mode = j.at("mode");
  r.label = j.at("label");
  r.device = j.at("device");
  r.devices = j.at("devices");
  r.threads = j.at("threads");
  r.global_batch = j.at("global_batch");
  r.per_rank_batch = j.at("per_rank_batch");
  for (double v : j.at("step_ms").get<std::vector<double>>()) r.step_s.push_back(v * s);
  r.losses = j.at("losses").get<std::vector<double>>();
  r.peak_memory_bytes = int64_t(j.at("peak_memory_mib").get<double>() * (1 << 20));
  r.optimizer_state_bytes = int64_t(j.value("optimizer_state_mib", 0.0) * (1 << 20));
  r.optimizer_state_total = int64_t(j.value("optimizer_state_total_mib", 0.0) * (1 << 20));
  r.state_bytes = int64_t(j.value("state_mib", 0.0) * (1 << 20));
  const auto& b = j.at("breakdown");
  Breakdown& d = r.breakdown;
  d.forward = b.at("forward_ms").get<double>() * s;
  d.backward = b.at("backward_ms").get<double>() * s;
  d.reduce_exposed = b.at("reduce_exposed_ms").get<double>() * s;
  d.reduce_hidden = b.at("reduce_hidden_ms").get<double>() * s;
  d.optimizer = b.at("optimizer_ms").get<double>() * s;
  d.data_wait = b.at("data_wait_ms").get<double>() * s;
  d.dp_replicate = b.at("dp_replicate_ms").get<double>() * s;
  d.dp_scatter = b.at("dp_scatter_ms").get<double>() * s;
  d.dp_gather = b.at("dp_gather_ms").get<double>() * s;
  d.dp_reduce = b.at("dp_reduce_ms").get<double>() * s;
  d.ddp_broadcast = b.value("ddp_broadcast_ms", 0.0) * s;
  const auto& g = j.at("ddp");
  r.bucket_bytes = g.at("bucket_bytes").get<std::vector<int64_t>>();
  r.comm_s = g.at("comm_ms").get<double>() * s;
  r.exposed_s = g.at("exposed_ms").get<double>() * s;
  r.hidden_fraction = g.at("hidden_fraction");
  r.grad_bytes_per_step = g.value("grad_bytes_per_step", int64_t(0));
  r.collectives_per_step = g.value("collectives_per_step", 0.0);
  r.payload_bytes_per_step = g.value("payload_bytes_per_step", 0.0);
  r.messages_per_bucket = g.value("messages_per_bucket", 1);
  r.buffer_bytes = g.value("buffer_bytes", int64_t(0));
  r.broadcasts_per_step = g.value("buffer_broadcasts_per_step", 0.0);
  r.zero_broadcast_bytes = g.value("zero_broadcast_bytes_per_step", int64_t(0));
  r.zero_broadcasts = g.value("zero_broadcasts_per_step", int64_t(0));
  r.sweep_bytes = g.at("allreduce_sweep_bytes").get<std::vector<double>>();
  for (double v : g.at("allreduce_sweep_ms").get<std::vector<double>>()) r.sweep_s.push_back(v * s);
  const auto& c = j.at("compute");
  r.compute_batch = c.at("batch");
  r.compute_step_s = c.at("step_ms").get<double>() * s;
  r.compute_backward_s = c.at("backward_ms").get<double>() * s;
  return r;
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
  // One projected point: the fields both projection lists share.
  auto point = [](const Projection& q) {
    return nlohmann::json{{"devices", q.devices},
                          {"step_ms", q.step_s * 1e3},
                          {"allreduce_ms", q.allreduce_s * 1e3},
                          {"broadcast_ms", q.broadcast_s * 1e3},
                          {"exposed_ms", q.exposed_s * 1e3},
                          {"samples_per_s", q.samples_per_s},
                          {"speedup", q.speedup},
                          {"efficiency", q.efficiency}};
  };
  nlohmann::json proj = nlohmann::json::array();
  for (const auto& p : rep.projections)
    for (const Projection& q : p.points) {
      nlohmann::json j = point(q);
      j["link"] = p.link.name;
      j["bandwidth_GBps"] = p.link.bandwidth_Bps / 1e9;
      j["latency_us"] = p.link.latency_s * 1e6;
      proj.push_back(std::move(j));
    }
  nlohmann::json variants = nlohmann::json::array();
  for (const VariantProjection& v : rep.variants)
    for (const auto& set : v.sets)
      for (const Projection& q : set.points) {
        nlohmann::json j = point(q);
        j["mode"] = v.label;
        j["link"] = set.link.name;
        j["wire_scale"] = v.model.wire_scale;
        j["compute_ms"] = v.model.compute_s * 1e3;
        j["measured_compute_ms"] = v.measured_compute_s * 1e3;
        j["messages_per_bucket"] = v.model.messages_per_bucket;
        variants.push_back(std::move(j));
      }
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
