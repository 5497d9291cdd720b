// minidl-run --max-restarts N (torchrun's meaning, one node): after a rank fails and all ranks
// are stopped, the group is relaunched with `--resume auto` appended (when the program takes it),
// at most N times. A failure before any rank wrote MINIDL_PROGRESS_FILE (the apps do after each
// complete checkpoint) is not retried: with nothing to resume from it would repeat.
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "parallel/launch/run.h"
#include "tensor/error.h"

namespace minidl::dist {

namespace {

// Whether `program --help` (stdin closed, 10 s at most) lists a --resume flag.
bool program_accepts_resume(const std::string& program) {
  std::string quoted = "'";
  for (char c : program) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  quoted += "'";
  const std::string cmd = "timeout 10 " + quoted + " --help </dev/null 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return false;
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  ::pclose(p);
  return out.find("--resume") != std::string::npos;
}

bool progress_made(const std::string& file) {
  std::error_code ec;
  return std::filesystem::exists(file, ec) && std::filesystem::file_size(file, ec) > 0 && !ec;
}

}  // namespace

int launch_with_restarts(const LaunchOptions& o, const std::vector<std::string>& argv,
                         const PlanFor& plan_for) {
  const std::string progress_file = (std::filesystem::temp_directory_path() /
                                     ("minidl-run-" + std::to_string(::getpid()) + ".progress"))
                                        .string();
  std::error_code ec;
  std::filesystem::remove(progress_file, ec);
  struct Cleanup {
    const std::string& path;
    ~Cleanup() {
      std::error_code e;
      std::filesystem::remove(path, e);
    }
  } cleanup{progress_file};
  auto note = [&](const std::string& line) {
    if (o.verbose) std::fprintf(stderr, "minidl-run: %s\n", line.c_str());
  };
  std::vector<std::string> args = argv;
  std::string how;  // how the restarts resume, decided at the first restart
  for (int attempt = 0;; ++attempt) {
    RunOutcome outcome;
    const int rc = run_ranks(plan_for(args, attempt, progress_file), &outcome);
    if (rc == 0 || outcome.interrupted || outcome.failed_rank < 0) return rc;
    const std::string failed = "attempt " + std::to_string(attempt + 1) + " of " +
                               std::to_string(o.max_restarts + 1) + " failed: " + outcome.cause;
    if (attempt >= o.max_restarts) {
      note(failed + "; no restarts left (--max-restarts " + std::to_string(o.max_restarts) + ")");
      return rc;
    }
    if (!progress_made(progress_file)) {
      note(failed + " before any rank completed a checkpoint (nothing was written to " +
           "MINIDL_PROGRESS_FILE): not restarting, the failure would repeat");
      return rc;
    }
    if (how.empty()) {
      const std::vector<std::string> next = restart_argv(argv, program_accepts_resume(argv[0]));
      how = next == argv ? "with the same arguments (the program takes no --resume, or has no "
                           "--checkpoint-dir)"
                         : "with --resume auto";
      args = next;
    }
    note(failed + "; restarting all " + std::to_string(o.nproc_per_node) + " rank(s) (restart " +
         std::to_string(attempt + 1) + " of " + std::to_string(o.max_restarts) + ") " + how);
  }
}

}  // namespace minidl::dist
