// file:// rendezvous: rank 0 publishes its TcpStore's address in a file (written atomically
// via rename, reclaimed when its writer is dead or it is older than the timeout, removed on
// every exit path); the other ranks poll for it, bounded by the timeout.
#include "parallel/rendezvous/file_rendezvous.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <optional>
#include <thread>

#include "tensor/error.h"

namespace minidl::dist {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string local_host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

RendezvousFileGuard::~RendezvousFileGuard() {
  if (!path.empty()) ::unlink(path.c_str());
}

namespace {

struct FileRecord {
  std::string host;
  int port = 0;
  int pid = 0;
};

constexpr const char* kFileMagic = "minidl-rendezvous-v1";

std::optional<FileRecord> read_record(const std::string& path) {
  std::ifstream f(path);
  std::string magic;
  FileRecord r;
  if (!(f >> magic >> r.host >> r.port >> r.pid) || magic != kFileMagic) return std::nullopt;
  return r;
}

bool pid_alive(int pid) {
  return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM);
}

double file_age_s(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return double(::time(nullptr) - st.st_mtime);
}

}  // namespace

std::shared_ptr<TcpStore> file_rendezvous_master(const std::string& path, int rank,
                                                 milliseconds timeout, RendezvousFileGuard& guard) {
  const std::string me = local_host_name();
  if (::access(path.c_str(), F_OK) == 0) {
    auto rec = read_record(path);
    const double age = file_age_s(path);
    const bool dead = rec && rec->host == me && !pid_alive(rec->pid);
    const bool old = age * 1000 > double(timeout.count());
    MINIDL_CHECK(rec || old, "rendezvous file ", path,
                 " exists and is not a minidl rendezvous file; use a fresh path per job");
    MINIDL_CHECK(dead || old, "rendezvous file ", path, " is in use by live pid ", rec->pid,
                 " on host ", rec->host, " (written ", age,
                 " s ago); another job is using it: use a fresh path per job");
    ::unlink(path.c_str());  // stale: left by a killed job
  }
  auto store = std::make_shared<TcpStore>(
      TcpStoreOptions{.host = me, .port = 0, .is_master = true, .timeout = timeout, .rank = rank});
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp);
    f << kFileMagic << "\n" << me << "\n" << store->port() << "\n" << ::getpid() << "\n";
    MINIDL_CHECK(f.good(), "rendezvous: cannot write ", tmp);
  }
  guard.path = path;
  MINIDL_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "rendezvous: cannot create ", path, ": ",
               std::strerror(errno));
  return store;
}

std::shared_ptr<TcpStore> file_rendezvous_client(const std::string& path, int rank,
                                                 milliseconds timeout) {
  const std::string me = local_host_name();
  const auto deadline = Clock::now() + timeout;
  std::string why = "it did not appear (is rank 0 running?)";
  for (;;) {
    if (auto rec = read_record(path)) {
      const bool local = rec->host == me;
      if (!local || pid_alive(rec->pid)) {
        auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
        return std::make_shared<TcpStore>(
            TcpStoreOptions{.host = local ? "127.0.0.1" : rec->host,
                            .port = rec->port,
                            .timeout = std::max(left, milliseconds(1)),
                            .rank = rank});
      }
      why = "it names pid " + std::to_string(rec->pid) +
            ", which is dead (a stale file from a "
            "killed job; remove it or use a fresh path per job)";
    }
    MINIDL_CHECK(Clock::now() < deadline, "rendezvous via file://", path, " (rank ", rank,
                 "): no live rank 0 address within ", format_seconds(timeout), ": ", why);
    std::this_thread::sleep_for(milliseconds(20));
  }
}

}  // namespace minidl::dist
