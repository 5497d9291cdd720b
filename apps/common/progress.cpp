// ProgressBar: in-place bar on a terminal (redrawn at most 10 times a second), plain lines
// otherwise.
#include "apps/common/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace minidl::apps {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

bool ProgressBar::stdout_is_terminal() {
  return isatty(STDOUT_FILENO) == 1;
}

ProgressBar::ProgressBar(std::string desc, int64_t total, bool enabled, int64_t plain_every)
    : desc_(std::move(desc)),
      total_(total),
      plain_every_(plain_every > 0 ? plain_every : 1),
      enabled_(enabled),
      tty_(stdout_is_terminal()),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

std::string ProgressBar::line(int64_t step, double loss, bool final) const {
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double rate = elapsed > 0 ? double(step) / elapsed : 0;
  double eta = rate > 0 ? double(total_ - step) / rate : NAN;
  char stats[160];
  std::snprintf(stats, sizeof stats, "%lld/%lld [%s<%s, %.1f it/s, loss %.4f]", (long long)step,
                (long long)total_, format_duration(elapsed).c_str(),
                final ? "0:00" : format_duration(eta).c_str(), rate, loss);
  if (!tty_) return desc_ + " " + stats;
  constexpr int kWidth = 30;
  int filled = total_ > 0 ? int(double(kWidth) * double(step) / double(total_)) : kWidth;
  std::string bar(size_t(filled), '#');
  bar.resize(kWidth, '.');
  int pct = total_ > 0 ? int(100.0 * double(step) / double(total_)) : 100;
  char head[32];
  std::snprintf(head, sizeof head, " %3d%% |", pct);
  return desc_ + head + bar + "| " + stats;
}

void ProgressBar::update(int64_t step, double loss) {
  last_step_ = step;
  last_loss_ = loss;
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (tty_) {
    if (step < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    std::printf("\r%s\x1b[K", line(step, loss, false).c_str());
    std::fflush(stdout);
  } else if (step % plain_every_ == 0 && step < total_) {
    std::printf("%s\n", line(step, loss, false).c_str());
    std::fflush(stdout);
  }
}

void ProgressBar::close(const std::string& suffix) {
  if (!enabled_) return;
  std::string text = line(last_step_, last_loss_, true);
  if (!suffix.empty()) text += " " + suffix;
  std::printf(tty_ ? "\r%s\x1b[K\n" : "%s\n", text.c_str());
  std::fflush(stdout);
  enabled_ = false;
}

}  // namespace minidl::apps
