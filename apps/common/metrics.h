// Training metrics: JSON-lines records (--log-json) and a training-curve plot (--plot): PNG via
// gnuplot when it is installed (Debian's gnuplot-nox), otherwise an SVG written directly.
#pragma once
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace minidl::apps {

// Appends one JSON object per line, flushed at once so a crash keeps every finished record.
// The --log-json file of `rank`: a path holding "{rank}" gives every rank its own file (the
// placeholder replaced by the rank); any other path is written by rank 0 only (empty otherwise).
std::string rank_log_path(const std::string& path, int rank);

class JsonLinesLog {
 public:
  JsonLinesLog() = default;
  // Opens `path` (append when `append`, e.g. on --resume); throws naming the file on failure.
  JsonLinesLog(const std::string& path, bool append);
  ~JsonLinesLog();
  JsonLinesLog(const JsonLinesLog&) = delete;
  JsonLinesLog& operator=(const JsonLinesLog&) = delete;
  JsonLinesLog(JsonLinesLog&& o) noexcept { *this = std::move(o); }
  JsonLinesLog& operator=(JsonLinesLog&& o) noexcept;
  void write(const nlohmann::json& record);
  bool enabled() const { return file_ != nullptr; }

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
};

// The curves of a run: x is the fractional epoch.
struct TrainingCurves {
  std::vector<double> train_x, train_loss;         // running train loss samples
  std::vector<double> epoch, test_loss, test_acc;  // per evaluation; acc in percent (optional)
  std::string x_label = "epoch";                   // the unit of train_x and epoch
  std::string eval_label = "test";                 // the evaluated split's name
};

// Writes the plot: `path` ending in .png uses gnuplot if found on PATH (else an SVG is written
// next to it as <path>.svg, with a note on stderr); .svg is written directly. Returns the file
// actually written. Throws naming the file on I/O failure or another extension.
std::string write_training_plot(const std::string& path, const TrainingCurves& curves,
                                const std::string& title);

}  // namespace minidl::apps
