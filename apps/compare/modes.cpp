// minidl-compare's modes (run.h): the names --modes accepts and what each turns on, which of
// them launch processes, and a run's step-time percentiles and throughput.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "apps/compare/run.h"
#include "tensor/error.h"

namespace minidl::compare {

double RunResult::step_p(double q) const {
  if (step_s.empty()) return 0;
  std::vector<double> v = step_s;
  std::sort(v.begin(), v.end());
  const double pos = q * double(v.size() - 1);
  const size_t lo = size_t(std::floor(pos)), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - double(lo)) * (v[hi] - v[lo]);
}

double RunResult::samples_per_s() const {
  if (step_s.empty()) return 0;
  const double mean = std::accumulate(step_s.begin(), step_s.end(), 0.0) / double(step_s.size());
  return double(global_batch) / mean;
}

ModeSpec parse_mode(const std::string& mode, int powersgd_rank) {
  ModeSpec m;
  m.base = is_multiprocess_mode(mode) ? "ddp" : mode;
  if (mode == "fsdp") m.fsdp = "full";
  if (mode == "fsdp-grad-op") m.fsdp = "grad-op";
  if (mode == "ddp-zero1") m.zero1 = true;
  if (mode == "ddp-syncbn") m.sync_bn = true;
  if (mode == "ddp-fp16") m.comm_hook = "fp16";
  if (mode == "ddp-bf16") m.comm_hook = "bf16";
  if (mode == "ddp-powersgd") m.comm_hook = "powersgd:" + std::to_string(powersgd_rank) + ":2";
  const std::vector<std::string> known = known_modes();
  if (std::find(known.begin(), known.end(), mode) == known.end()) {
    std::string list;
    for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
    MINIDL_FAIL("--modes: unknown mode '", mode, "' (", list, ")");
  }
  return m;
}

std::vector<std::string> known_modes() {
  return {"single",   "dp",           "ddp",        "ddp-zero1", "ddp-fp16",
          "ddp-bf16", "ddp-powersgd", "ddp-syncbn", "fsdp",      "fsdp-grad-op"};
}

bool is_ddp_mode(const std::string& mode) {
  return mode == "ddp" || mode.rfind("ddp-", 0) == 0;
}

bool is_fsdp_mode(const std::string& mode) {
  return mode == "fsdp" || mode == "fsdp-grad-op";
}

bool is_multiprocess_mode(const std::string& mode) {
  return is_ddp_mode(mode) || is_fsdp_mode(mode);
}

std::string default_data(const std::string& model) {
  return model == "gpt" ? "data/moby-dick/data.txt" : "data/mnist";
}

}  // namespace minidl::compare
