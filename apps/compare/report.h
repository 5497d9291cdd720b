// minidl-compare's report: the loss-consistency check across modes, the comparison table with
// the per-step breakdown, explanation lines computed from the numbers, the cost-model
// projection, the JSON document and the bar chart (gnuplot PNG, or an SVG without gnuplot).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/compare/run.h"
#include "apps/compare/cost_model.h"

namespace minidl::compare {

struct Consistency {
  double tolerance = 0;     // relative
  double max_rel_diff = 0;  // over every mode and step against the reference row
  // Rows with their own tolerance (RunResult::tolerance: per-replica BatchNorm statistics,
  // compressed gradients) are checked against it and counted here instead.
  double loose_max_rel_diff = 0;
  int64_t steps = 0;      // steps compared
  std::string reference;  // the row compared against (the first one)
  std::string error;      // "" when every mode agrees
};

// Rows that do not compute exactly the single device's function get their own loss-check
// tolerance (RunResult::tolerance and its reason): resnet-mini's dp/ddp rows (per-replica
// BatchNorm statistics, not ddp-syncbn), ddp-fp16, ddp-bf16 and ddp-powersgd (rounded or
// approximated gradients).
void set_row_tolerance(RunResult& r, const std::string& model);

// minidl-compare --help's footer: the modes, the JSON fields and the projection's formula.
const char* help_footer();

// Compares every row's per-step losses with rows[0]'s: |a - b| / max(|b|, 1e-12) <= tolerance
// (a row's own RunResult::tolerance when set). On failure `error` names both modes, the step and
// both losses.
Consistency check_consistency(const std::vector<RunResult>& rows, double tolerance);

struct ProjectionSet {
  Link link;
  std::vector<Projection> points;
};

// One DDP row's projection (ddp and its variants, each with its own bytes on the wire, buckets'
// hidden share, compute and exposed collectives) on the named links.
struct VariantProjection {
  std::string label;
  StepModel model;                  // the ddp row's compute and overlap, this row's traffic
  double measured_compute_s = 0;    // this row's own T_c (informative)
  std::vector<ProjectionSet> sets;  // one per named link, in --link order
};

struct Report {
  std::string title;  // "mnist-cnn, global batch 128, 20 steps after 3 warm-up, cpu"
  std::string load_before, load_after;  // /proc/loadavg's 1-minute figure around the runs
  int cores = 1;
  std::vector<RunResult> rows;
  Consistency consistency;
  // The cost model (absent when no ddp row with a single row to take T_c from).
  bool has_model = false;
  bool has_single = false;  // T_1 measured by a single row (else T_c stands in)
  StepModel model;
  Link local;  // fitted from the DDP rank's allreduce sweep (when has_local)
  bool has_local = false;
  std::string local_error;  // why the fit failed (e.g. times not growing with size under load)
  std::vector<ProjectionSet> projections;
  std::vector<VariantProjection> variants;      // every ddp-family row (with 2+ of them)
  int measured_devices = 0;                     // the DDP row's world size
  double measured_step_s = 0;                   // its p50 step
  double predicted_step_s = 0;                  // the model with the fitted local link at that size
  double speedup(const RunResult& r) const;     // samples/s over rows[0]'s
  double efficiency(const RunResult& r) const;  // speedup / devices (single: / threads)
};

// The cost model of a ddp-family row: its compute and backward, buckets, hidden share, wire
// bytes (comm hooks), buffer broadcasts and ZeRO-1 parameter broadcasts.
StepModel step_model_of(const RunResult& ddp_row);

// Fills the model part of `report` from its rows: T_1 from the single row's per-rank-batch
// timing (without a single row: T_c), T_c, backward, buckets and hidden fraction from the ddp
// row (the first plain one, else the first variant), the local link from its allreduce sweep;
// projects N = 1, 2, 4 ... 64 on `links` (the fitted local link first). With 2+ ddp-family
// rows, also each of them on `links` (Report::variants).
void build_projection(Report& report, const std::vector<Link>& links);

std::string format_table(const Report& report);
// printf-style formatting of one number ("%.2f"), for the table and projection text.
std::string fmt(const char* format, double value);
std::vector<std::string> explain(const Report& report);
std::string format_projection(const Report& report);
nlohmann::json report_json(const Report& report);
// `path` ending in .png: gnuplot when installed, else <path>.svg (note on stderr); .svg: SVG.
// Returns the file written.
std::string write_compare_plot(const std::string& path, const Report& report);

}  // namespace minidl::compare
