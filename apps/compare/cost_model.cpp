// The ring-allreduce cost model behind minidl-compare's projection (see cost_model.h).
#include "apps/compare/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tensor/error.h"

namespace minidl::compare {

std::string Link::describe() const {
  char buf[160];
  const double gbps = bandwidth_Bps / 1e9;
  std::snprintf(buf, sizeof(buf), "%s (%.3g GB/s, %.3g us)", name.c_str(), gbps, latency_s * 1e6);
  return buf;
}

namespace {
struct NamedLink {
  const char* name;
  double gbps, us;
};
// Assumptions (order of magnitude of one direction of one hop), not measurements.
constexpr NamedLink kLinks[] = {
    {"nvlink", 150, 5}, {"pcie", 12, 10}, {"ib100", 10, 5}, {"eth10", 1.1, 50}};
}  // namespace

std::vector<std::string> named_link_names() {
  std::vector<std::string> out;
  for (const auto& l : kLinks) out.emplace_back(l.name);
  return out;
}

Link named_link(const std::string& name) {
  for (const auto& l : kLinks)
    if (name == l.name) return Link{l.name, l.gbps * 1e9, l.us * 1e-6};
  MINIDL_FAIL("unknown link '", name, "' (known: nvlink, pcie, ib100, eth10)");
}

double ring_allreduce_seconds(int n, double bytes, const Link& link) {
  MINIDL_CHECK(n >= 1, "ring allreduce: device count must be >= 1, got ", n);
  MINIDL_CHECK(link.bandwidth_Bps > 0, "ring allreduce: bandwidth must be positive, got ",
               link.bandwidth_Bps);
  if (n == 1) return 0.0;
  const double steps = 2.0 * double(n - 1);
  return steps / double(n) * bytes / link.bandwidth_Bps + steps * link.latency_s;
}

double ring_allreduce_seconds(int n, const std::vector<int64_t>& bucket_bytes, const Link& link) {
  double t = 0;
  for (int64_t b : bucket_bytes) t += ring_allreduce_seconds(n, double(b), link);
  return t;
}

LineFit fit_line(const std::vector<double>& x, const std::vector<double>& y) {
  MINIDL_CHECK(x.size() == y.size(), "fit_line: ", x.size(), " x values but ", y.size(),
               " y values");
  const double n = double(x.size());
  MINIDL_CHECK(x.size() >= 2, "fit_line: needs at least 2 points, got ", x.size());
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) mx += x[i] / n, my += y[i] / n;
  double sxx = 0, sxy = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
    syy += (y[i] - my) * (y[i] - my);
  }
  MINIDL_CHECK(sxx > 0, "fit_line: all x values are equal (", mx, ")");
  LineFit f;
  f.b = sxy / sxx;
  f.a = my - f.b * mx;
  f.r2 = syy > 0 ? (sxy * sxy) / (sxx * syy) : 1.0;
  return f;
}

Link fit_link(int n, const std::vector<double>& bytes, const std::vector<double>& seconds) {
  MINIDL_CHECK(n >= 2, "fit_link: needs measurements over 2+ ranks, got ", n);
  LineFit f = fit_line(bytes, seconds);
  MINIDL_CHECK(f.b > 0, "fit_link: allreduce time does not grow with size (slope ", f.b,
               " s/byte); the measurements are too noisy to fit a link");
  const double steps = 2.0 * double(n - 1);
  Link l;
  l.name = "local (fitted)";
  l.bandwidth_Bps = steps / double(n) / f.b;
  l.latency_s = std::max(0.0, f.a / steps);
  return l;
}

double broadcast_seconds(int n, const StepModel& m, const Link& link) {
  if (n <= 1) return 0;
  const double bw = link.bandwidth_Bps, nn = double(n);
  const double tree = m.broadcasts * std::ceil(std::log2(nn)) * link.latency_s +
                      (m.broadcasts > 0 ? double(m.broadcast_bytes) / bw : 0.0);
  const double owners = m.after_step_per_rank * nn * std::ceil(std::log2(nn)) * link.latency_s +
                        (m.after_step_bytes > 0 ? double(m.after_step_bytes) / bw : 0.0);
  return tree + owners;
}

Projection project_step(const StepModel& m, int n, const Link& link) {
  MINIDL_CHECK(m.compute_s > 0, "projection: compute time must be positive, got ", m.compute_s);
  Projection p;
  p.devices = n;
  if (m.wire_scale == 1 && m.messages_per_bucket == 1) {
    p.allreduce_s = ring_allreduce_seconds(n, m.bucket_bytes, link);
  } else {
    for (int64_t b : m.bucket_bytes)
      p.allreduce_s +=
          ring_allreduce_seconds(n, double(b) * m.wire_scale, link) +
          (n > 1 ? double(m.messages_per_bucket - 1) * 2.0 * double(n - 1) * link.latency_s : 0.0);
  }
  const double h = std::clamp(m.hidden_fraction, 0.0, 1.0);
  const double hidden = std::min(h * p.allreduce_s, std::max(m.backward_s, 0.0));
  p.broadcast_s = broadcast_seconds(n, m, link);
  p.exposed_s = p.allreduce_s - hidden + p.broadcast_s;
  const double single = m.single_s > 0 ? m.single_s : m.compute_s;
  p.step_s = n == 1 ? single : m.compute_s + p.exposed_s;
  p.samples_per_s = double(n) * double(m.per_rank_batch) / p.step_s;
  p.speedup = double(n) * single / p.step_s;
  p.efficiency = p.speedup / double(n);
  return p;
}

std::vector<Projection> project(const StepModel& m, const std::vector<int>& ns, const Link& link) {
  std::vector<Projection> out;
  out.reserve(ns.size());
  for (int n : ns) out.push_back(project_step(m, n, link));
  return out;
}

}  // namespace minidl::compare
