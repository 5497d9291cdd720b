// Console progress for training loops: a tqdm-like bar (count, it/s, loss, ETA) redrawn in place
// when stdout is a terminal, plain periodic lines otherwise (logs, CI). Rank 0 prints; others
// construct it disabled.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace minidl::apps {

class ProgressBar {
 public:
  // `total` steps; `desc` prefixes each line ("epoch 1/3"). `enabled=false` prints nothing.
  // Without a terminal a plain line is printed every `plain_every` steps and at the end.
  ProgressBar(std::string desc, int64_t total, bool enabled, int64_t plain_every = 50);
  // Records that `step` steps are done (1-based) with the latest running loss.
  void update(int64_t step, double loss);
  // Ends the bar (newline in terminal mode) with an optional suffix ("test acc 98.1%").
  void close(const std::string& suffix = "");

  static bool stdout_is_terminal();

 private:
  std::string line(int64_t step, double loss, bool final) const;
  std::string desc_;
  int64_t total_, plain_every_;
  bool enabled_, tty_;
  int64_t last_step_ = 0;
  double last_loss_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// "1:05" / "1:02:03" for a number of seconds.
std::string format_duration(double seconds);

}  // namespace minidl::apps
