// minidl-compare's cost model of a DDP step: ring allreduce 2(N-1)/N * bytes / bandwidth +
// 2(N-1) * latency per bucket, a link fitted from measured allreduces, and the projected step
// time and speedup for N devices. Pure functions (unit-tested in test_compare_cost_model.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace minidl::compare {

// A link between devices: bandwidth in bytes/s, per-message latency in seconds.
struct Link {
  std::string name;
  double bandwidth_Bps = 0;
  double latency_s = 0;
  std::string describe() const;  // "pcie (12 GB/s, 10 us)"
};

// The named links (assumed figures, per direction, for one device pair in a ring):
//   nvlink 150 GB/s, 5 us | pcie 12 GB/s, 10 us | ib100 10 GB/s, 5 us | eth10 1.1 GB/s, 50 us.
// Throws naming the link and the known names.
Link named_link(const std::string& name);
std::vector<std::string> named_link_names();

// Ring allreduce of `bytes` over n devices: 2(n-1)/n * bytes / bandwidth + 2(n-1) * latency
// (0 for n = 1).
double ring_allreduce_seconds(int n, double bytes, const Link& link);
// Sum over the buckets (each bucket is its own allreduce, so each pays the latency term).
double ring_allreduce_seconds(int n, const std::vector<int64_t>& bucket_bytes, const Link& link);

// Least squares y = a + b x (needs 2+ distinct x; throws otherwise).
struct LineFit {
  double a = 0, b = 0;
  double r2 = 0;  // coefficient of determination
};
LineFit fit_line(const std::vector<double>& x, const std::vector<double>& y);

// The link that explains allreduce times `seconds` of `bytes` measured over n >= 2 ranks:
// t = 2(n-1) latency + 2(n-1)/n bytes / bandwidth fitted by least squares (latency clamped to
// >= 0; throws when the fitted slope is not positive). Named "local (fitted)".
Link fit_link(int n, const std::vector<double>& bytes, const std::vector<double>& seconds);

// What was measured on this machine, per step of one rank at the per-rank batch.
struct StepModel {
  // T_c: a DDP rank's step without its exposed communication, measured while the ranks run
  // side by side (on a shared machine they slow each other down; separate devices would not).
  double compute_s = 0;
  double single_s = 0;    // one device alone (the N = 1 step and the speedup's base; 0: T_c)
  double backward_s = 0;  // a rank's backward compute (the most communication can hide behind)
  std::vector<int64_t> bucket_bytes;  // DDP's gradient buckets (bytes allreduced per step)
  double hidden_fraction = 0;         // share of the allreduce hidden behind backward (measured)
  int64_t per_rank_batch = 1;
  // What a DDP variant sends instead: a comm hook's payload against the buckets' bytes
  // (fp16/bf16 0.5, PowerSGD (n + m) r / (n m) and the rest), and its allreduces per bucket
  // (PowerSGD: 2, P and Q), each paying the latency term.
  double wire_scale = 1;
  int messages_per_bucket = 1;
  // Exposed collectives outside the backward: the forwards' buffer broadcasts (a tree:
  // ceil(log2 N) latencies per broadcast + bytes / bandwidth) and ZeRO-1's parameter broadcasts
  // after the optimizer step (one per owner rank and dtype, each a tree of its shard: in all
  // N * per_rank * ceil(log2 N) latencies + bytes / bandwidth).
  int64_t broadcast_bytes = 0;
  double broadcasts = 0;  // per step
  int64_t after_step_bytes = 0;
  double after_step_per_rank = 0;  // ZeRO-1's broadcasts per step and owner rank (dtypes)
};

// The exposed collectives of StepModel outside the backward on n devices (0 for n = 1).
double broadcast_seconds(int n, const StepModel& m, const Link& link);

// DDP step on n >= 2 devices: T_c + exposed, exposed = T_ar(n) - min(h * T_ar(n), T_backward)
// + broadcast_seconds(n): the measured share h of the allreduce (of the buckets' bytes times
// wire_scale, messages_per_bucket messages each) overlaps backward, but never more than backward
// lasts. n = 1 is the single device's step.
struct Projection {
  int devices = 1;
  double allreduce_s = 0;  // T_ar(n)
  double broadcast_s = 0;  // broadcast_seconds(n)
  double exposed_s = 0;    // allreduce time not hidden behind backward, plus broadcast_s
  double step_s = 0;
  double samples_per_s = 0;
  double speedup = 1;     // n * T_single / step (weak scaling: fixed per-rank batch)
  double efficiency = 1;  // speedup / n
};
Projection project_step(const StepModel& m, int n, const Link& link);
std::vector<Projection> project(const StepModel& m, const std::vector<int>& ns, const Link& link);

}  // namespace minidl::compare
