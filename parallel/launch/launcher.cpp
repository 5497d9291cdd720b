// launch(): spawns the ranks (fork/exec, each in its own process group, stdout/stderr on
// pipes), prefixes and logs their output in a poll loop, and stops every rank when one fails
// or the launcher gets SIGINT/SIGTERM (forward, grace period, SIGKILL).
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "parallel/launch/launcher.h"
#include "parallel/launch/run.h"
#include "tensor/error.h"

extern char** environ;

namespace minidl::dist {

namespace {

std::string resolve_program(const std::string& name) {
  MINIDL_CHECK(!name.empty(), "minidl-run: no program given (usage: minidl-run [options] ",
               "PROGRAM [ARGS...])");
  auto runnable = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    MINIDL_CHECK(runnable(name), "minidl-run: program '", name, "' is not an executable file");
    return name;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t pos = 0;
  while (pos <= dirs.size()) {
    std::size_t colon = dirs.find(':', pos);
    std::string dir =
        dirs.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (runnable(candidate)) return candidate;
    if (colon == std::string::npos) break;
    pos = colon + 1;
  }
  MINIDL_FAIL("minidl-run: program '", name, "' not found in PATH");
}

// A fresh directory for the per-rank logs of a run that did not ask for any:
// $TMPDIR/minidl-run-XXXXXX (removed again when every rank succeeds).
std::string temporary_log_dir() {
  std::error_code ec;
  std::filesystem::path base = std::filesystem::temp_directory_path(ec);
  if (ec) base = "/tmp";
  std::string tmpl = (base / "minidl-run-XXXXXX").string();
  MINIDL_CHECK(::mkdtemp(tmpl.data()) != nullptr, "minidl-run: cannot create a log directory ",
               tmpl, ": ", std::strerror(errno), " (set --log-dir DIR or --log-dir none)");
  return tmpl;
}

int usable_cores() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

void validate(const LaunchOptions& o) {
  MINIDL_CHECK(o.nproc_per_node >= 1, "minidl-run: --nproc-per-node must be >= 1, got ",
               o.nproc_per_node);
  MINIDL_CHECK(o.nnodes >= 1, "minidl-run: --nnodes must be >= 1, got ", o.nnodes);
  MINIDL_CHECK(o.node_rank >= 0 && o.node_rank < o.nnodes, "minidl-run: --node-rank ", o.node_rank,
               " is outside [0, ", o.nnodes, ") for --nnodes ", o.nnodes);
  MINIDL_CHECK(o.master_port >= 0 && o.master_port <= 65535, "minidl-run: --master-port ",
               o.master_port, " is outside [0, 65535]");
  MINIDL_CHECK(o.master_port != 0 || o.nnodes == 1, "minidl-run: --nnodes ", o.nnodes,
               " needs an explicit --master-port (every node must agree on it)");
  MINIDL_CHECK(!o.master_addr.empty(), "minidl-run: --master-addr is empty");
  MINIDL_CHECK(o.max_restarts >= 0, "minidl-run: --max-restarts must be >= 0, got ",
               o.max_restarts);
  MINIDL_CHECK(o.max_restarts == 0 || o.nnodes == 1, "minidl-run: --max-restarts ", o.max_restarts,
               " works on one node only (--nnodes ", o.nnodes,
               "): the nodes' launchers do not agree on restarts");
  MINIDL_CHECK(o.device_per_rank == "auto" || o.device_per_rank == "none",
               "minidl-run: --device-per-rank must be auto or none, got '", o.device_per_rank, "'");
  MINIDL_CHECK(o.timeout_stop_s >= 0 && o.timeout_stop_s <= 3600,
               "minidl-run: --timeout-stop must be in [0, 3600] s, got ", o.timeout_stop_s);
}

// NAME=VALUE in env, replacing an inherited NAME.
void set_env(std::vector<std::string>& env, const std::string& name, const std::string& value) {
  std::erase_if(env, [&](const std::string& kv) { return kv.rfind(name + "=", 0) == 0; });
  env.push_back(name + "=" + value);
}

// The plan of attempt `attempt` (0: the first run; restarts get a fresh port when it is ours).
LaunchPlan make_plan(const LaunchOptions& options, const std::vector<std::string>& argv,
                     const std::string& program, const std::string& log_dir, bool temporary_logs,
                     int attempt, const std::string& progress_file) {
  LaunchPlan plan;
  plan.options = options;
  plan.program = program;
  plan.argv = argv;
  plan.log_dir = log_dir;
  std::vector<std::string> devices;
  if (options.device_per_rank == "auto") devices = device_plan(options, visible_gpus());
  plan.master_port = options.master_port != 0 ? options.master_port : pick_free_port();
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const int omp_threads = std::max(1, usable_cores() / options.nproc_per_node);
  std::vector<std::string> base;
  for (char** e = environ; e && *e; ++e) base.emplace_back(*e);
  for (int local = 0; local < options.nproc_per_node; ++local) {
    plan.envs.push_back(rank_env(base, options, local, plan.master_port, omp_threads));
    for (const char* name : {"MINIDL_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"})
      set_env(plan.envs.back(), name, std::to_string(attempt));
    set_env(plan.envs.back(), "TORCHELASTIC_MAX_RESTARTS", std::to_string(options.max_restarts));
    if (!progress_file.empty()) set_env(plan.envs.back(), "MINIDL_PROGRESS_FILE", progress_file);
  }
  if (options.verbose && attempt == 0) {
    const int world = options.nnodes * options.nproc_per_node;
    std::string banner = "minidl-run: " + std::to_string(options.nproc_per_node) + " rank(s)";
    if (options.nnodes > 1) {
      banner += " on node " + std::to_string(options.node_rank) + " of " +
                std::to_string(options.nnodes) + " (world size " + std::to_string(world) + ")";
    }
    banner += ", master " + options.master_addr + ":" + std::to_string(plan.master_port);
    banner += ", OMP_NUM_THREADS=" +
              (omp ? std::string(omp) + " (from the environment)" : std::to_string(omp_threads));
    banner += plan.log_dir.empty() ? ", no log files" : ", logs in " + plan.log_dir + "/";
    if (temporary_logs) banner += " (removed unless a rank fails; --log-dir DIR keeps them)";
    if (options.max_restarts > 0)
      banner += ", up to " + std::to_string(options.max_restarts) + " restart(s)";
    plan.banner.push_back(banner);
    for (const std::string& d : devices) plan.banner.push_back("minidl-run: " + d);
  }
  return plan;
}

}  // namespace

int launch(const LaunchOptions& options, const std::vector<std::string>& argv) {
  validate(options);
  MINIDL_CHECK(!argv.empty(), "minidl-run: no program given (usage: minidl-run [options] ",
               "PROGRAM [ARGS...])");
  const std::string program = resolve_program(argv[0]);
  std::string log_dir = options.log_dir;
  if (log_dir.empty()) {
    const char* env = std::getenv("MINIDL_LOG_DIR");
    log_dir = env ? env : "";
  }
  const bool temporary = log_dir.empty();
  if (temporary) {
    log_dir = temporary_log_dir();
  } else if (log_dir == "none") {
    log_dir.clear();
  } else {
    std::error_code ec;
    std::filesystem::create_directories(log_dir, ec);
    MINIDL_CHECK(!ec, "minidl-run: cannot create --log-dir '", log_dir, "': ", ec.message());
  }
  int rc = 0;
  try {
    rc = options.max_restarts == 0
             ? run_ranks(make_plan(options, argv, program, log_dir, temporary, 0, ""))
             : launch_with_restarts(
                   options, argv,
                   [&](const std::vector<std::string>& args, int attempt, const std::string& f) {
                     return make_plan(options, args, program, log_dir, temporary, attempt, f);
                   });
  } catch (...) {
    std::error_code ec;
    if (temporary) std::filesystem::remove(log_dir, ec);  // only if empty (nothing ran)
    throw;
  }
  if (temporary) {
    std::error_code ec;
    if (rc == 0)
      std::filesystem::remove_all(log_dir, ec);
    else if (options.verbose)
      std::fprintf(stderr, "minidl-run: per-rank logs kept in %s/\n", log_dir.c_str());
  }
  return rc;
}

bool launched_by_launcher() {
  const char* v = std::getenv("MINIDL_LAUNCHER");
  return v && std::string(v) == "1";
}

int self_launch(int nproc, int argc, char** argv, const std::vector<std::string>& drop_flags,
                LaunchOptions o) {
  MINIDL_CHECK(!launched_by_launcher(), "self_launch: already running under minidl-run (",
               "MINIDL_LAUNCHER=1); drop -n when launching with minidl-run");
  std::error_code ec;
  std::string exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  MINIDL_CHECK(!ec, "self_launch: cannot read /proc/self/exe: ", ec.message());
  std::vector<std::string> args(argv + std::min(argc, 1), argv + argc);
  args = strip_flags(args, drop_flags);
  args.insert(args.begin(), exe);
  o.nproc_per_node = nproc;
  return launch(o, args);
}

}  // namespace minidl::dist
