// The launcher's pure helpers: flag stripping for self-launch, free ports, wait-status text,
// GPU visibility and the rank -> device plan, per-rank environments, restart arguments, line
// splitting.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "parallel/launch/util.h"
#include "tensor/error.h"

namespace minidl::dist {

std::vector<std::string> strip_flags(const std::vector<std::string>& args,
                                     const std::vector<std::string>& drop_flags) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {  // everything after -- belongs to the program
      out.insert(out.end(), args.begin() + static_cast<long>(i), args.end());
      break;
    }
    bool dropped = false;
    for (const std::string& f : drop_flags) {
      if (a == f) {  // "-n 2": skip the value too
        ++i;
        dropped = true;
      } else if (a.rfind(f + "=", 0) == 0 ||
                 (f.size() == 2 && f[0] == '-' && f[1] != '-' && a.size() > 2 &&
                  a.rfind(f, 0) == 0)) {  // "--nproc=2", "-n2"
        dropped = true;
      }
      if (dropped) break;
    }
    if (!dropped) out.push_back(a);
  }
  return out;
}

int pick_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  MINIDL_CHECK(fd >= 0, "minidl-run: socket() failed: ", strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  int err = errno;
  ::close(fd);
  MINIDL_CHECK(ok, "minidl-run: could not get a free port from the OS: ", strerror(err));
  return ntohs(addr.sin_port);
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* abbrev = sigabbrev_np(sig);
    return "killed by signal " + std::to_string(sig) + " (" +
           (abbrev ? "SIG" + std::string(abbrev) : std::string("unknown")) + ")";
  }
  return "stopped with wait status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::vector<std::string> visible_gpus() {
  std::vector<std::string> gpus;
  if (const char* env = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::string s = env;
    std::size_t pos = 0;
    while (pos < s.size()) {
      std::size_t comma = s.find(',', pos);
      std::string id = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      id.erase(0, id.find_first_not_of(' '));
      id.erase(id.find_last_not_of(' ') + 1);
      bool numeric = !id.empty() && std::all_of(id.begin(), id.end(), ::isdigit);
      if (!numeric && id.rfind("GPU-", 0) != 0 && id.rfind("MIG-", 0) != 0) break;  // CUDA stops
      if (std::find(gpus.begin(), gpus.end(), id) != gpus.end()) break;  // duplicates too
      gpus.push_back(id);
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
    return gpus;
  }
  if (DIR* dir = ::opendir("/proc/driver/nvidia/gpus")) {
    int n = 0;
    while (dirent* e = ::readdir(dir)) n += e->d_name[0] != '.';
    ::closedir(dir);
    for (int i = 0; i < n; ++i) gpus.push_back(std::to_string(i));
  }
  return gpus;
}

std::vector<std::string> device_plan(const LaunchOptions& o, const std::vector<std::string>& gpus) {
  const int n = o.nproc_per_node;
  const int ngpu = static_cast<int>(gpus.size());
  MINIDL_CHECK(o.backend != "nccl" || ngpu >= n, "minidl-run: --backend nccl needs one GPU per ",
               "rank, but ", n, " ranks per node were asked for and ", ngpu,
               " GPU(s) are visible (CUDA_VISIBLE_DEVICES=",
               std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "unset",
               "); use -n ", std::max(ngpu, 1), " or --backend gloo");
  std::vector<std::string> plan;
  for (int local = 0; local < n; ++local) {
    int rank = o.node_rank * n + local;
    std::string line = "rank " + std::to_string(rank) + " -> ";
    if (ngpu == 0) {
      line += "cpu";
    } else {
      int k = local % ngpu;  // ranks share GPUs round-robin when there are more ranks (gloo)
      line += "cuda:" + std::to_string(k) + " (physical " + gpus[static_cast<std::size_t>(k)] + ")";
    }
    plan.push_back(line);
  }
  return plan;
}

std::vector<std::string> rank_env(const std::vector<std::string>& base, const LaunchOptions& o,
                                  int local_rank, int master_port, int omp_threads) {
  const int rank = o.node_rank * o.nproc_per_node + local_rank;
  const std::vector<std::pair<std::string, std::string>> set = {
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(o.nnodes * o.nproc_per_node)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
      {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(master_port)},
      {"MINIDL_LAUNCHER", "1"},
      // rank 0 hosts minidl's own store, whatever a surrounding torchrun told this process
      {"TORCHELASTIC_USE_AGENT_STORE", "False"}};
  std::vector<std::string> env;
  bool has_omp = false;
  for (const std::string& kv : base) {
    std::string name = kv.substr(0, kv.find('='));
    if (std::any_of(set.begin(), set.end(), [&](const auto& p) { return p.first == name; })) {
      continue;
    }
    has_omp = has_omp || name == "OMP_NUM_THREADS";
    env.push_back(kv);
  }
  for (const auto& [name, value] : set) env.push_back(name + "=" + value);
  if (!has_omp) env.push_back("OMP_NUM_THREADS=" + std::to_string(std::max(1, omp_threads)));
  return env;
}

std::vector<LineSplitter::Line> LineSplitter::feed(const char* data, std::size_t n) {
  std::vector<Line> lines;
  for (std::size_t i = 0; i < n; ++i) {
    char c = data[i];
    if (pending_cr_) {  // a '\r' ended the previous chunk: "\r\n" is a plain line end
      pending_cr_ = false;
      lines.push_back({std::move(partial_), c != '\n'});
      partial_.clear();
      if (c == '\n') continue;
    }
    if (c == '\n') {
      lines.push_back({std::move(partial_), false});
      partial_.clear();
    } else if (c == '\r') {
      pending_cr_ = true;
    } else {
      partial_ += c;
      if (partial_.size() >= max_line_) {
        lines.push_back({std::move(partial_), false});
        partial_.clear();
      }
    }
  }
  return lines;
}

bool LineSplitter::flush(Line& out) {
  if (partial_.empty() && !pending_cr_) return false;
  out = {std::move(partial_), false};
  partial_.clear();
  pending_cr_ = false;
  return true;
}

void LineTail::push(std::string line) {
  lines_.push_back(std::move(line));
  while (lines_.size() > capacity_) lines_.pop_front();
}

namespace {

bool has_flag(const std::vector<std::string>& argv, const std::string& flag) {
  for (const std::string& a : argv)
    if (a == flag || a.rfind(flag + "=", 0) == 0) return true;
  return false;
}

}  // namespace

std::vector<std::string> restart_argv(const std::vector<std::string>& argv, bool accepts_resume) {
  if (!accepts_resume || !has_flag(argv, "--checkpoint-dir")) return argv;
  std::vector<std::string> out = strip_flags(argv, {"--resume"});
  out.push_back("--resume");
  out.push_back("auto");
  return out;
}

}  // namespace minidl::dist
