// Checkpoint file naming, --resume resolution, pruning, and the stop request (see checkpoints.h).
#include "apps/common/checkpoints.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>

#include "tensor/error.h"

namespace minidl::apps {
namespace fs = std::filesystem;

namespace {

std::atomic<int> g_stop_requested{0};

extern "C" void on_stop_signal(int) {
  g_stop_requested.store(1);
}

// The number a checkpoint file name of `unit` stands for, or -1. With `shards`, the number of
// an FSDP run's shard directory ("<checkpoint file>.shards") instead.
int64_t checkpoint_number(const fs::path& p, const std::string& unit, bool shards = false) {
  const std::regex re("checkpoint-" + unit + R"(-(\d+)\.safetensors)" +
                      std::string(shards ? R"(\.shards)" : ""));
  std::smatch m;
  std::string name = p.filename().string();
  return std::regex_match(name, m, re) ? std::stoll(m[1]) : -1;
}

}  // namespace

std::string checkpoint_path(const std::string& dir, const std::string& unit, int64_t n) {
  return (fs::path(dir) / ("checkpoint-" + unit + "-" + std::to_string(n) + ".safetensors"))
      .string();
}

std::string resolve_resume(const std::string& arg, const std::string& checkpoint_dir,
                           const std::string& unit, std::string* note) {
  std::string dir = arg;
  if (arg == "auto") {
    MINIDL_CHECK(!checkpoint_dir.empty(), "--resume auto resumes from --checkpoint-dir, ",
                 "but no --checkpoint-dir was given");
    dir = checkpoint_dir;
  }
  const bool is_file_name = fs::path(dir).extension() == ".safetensors";
  if (!fs::exists(dir)) {
    MINIDL_CHECK(!is_file_name, "--resume: '", dir, "' does not exist");
  } else if (!fs::is_directory(dir)) {
    return dir;
  }
  std::string best;
  int64_t best_n = -1;
  if (fs::is_directory(dir)) {
    for (const auto& entry : fs::directory_iterator(dir)) {
      int64_t n = checkpoint_number(entry.path(), unit);
      if (n > best_n) best_n = n, best = entry.path().string();
    }
  }
  if (best_n < 0 && note) *note = "no checkpoint in " + dir + " yet: starting from scratch";
  return best;
}

void note_checkpoint_written(const std::string& path) {
  const char* file = std::getenv("MINIDL_PROGRESS_FILE");
  if (!file || !*file) return;
  if (std::FILE* f = std::fopen(file, "w")) {
    std::fprintf(f, "%s\n", path.c_str());
    std::fclose(f);
  }
}

void remove_older_checkpoints(const std::string& dir, const std::string& unit, int64_t keep) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    int64_t n = checkpoint_number(entry.path(), unit);
    if (n >= 0 && n < keep) fs::remove(entry.path());
    n = checkpoint_number(entry.path(), unit, /*shards=*/true);  // FSDP's shard directories
    if (n >= 0 && n < keep) fs::remove_all(entry.path());
  }
}

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESETHAND;  // a second Ctrl-C terminates at once
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // Over a file size limit (ulimit -f) a checkpoint write then fails with EFBIG and a one-line
  // error naming the file, instead of SIGXFSZ killing the process with a core dump.
  std::signal(SIGXFSZ, SIG_IGN);
}

bool stop_requested() {
  return g_stop_requested.load() != 0;
}

}  // namespace minidl::apps
