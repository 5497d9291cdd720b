// Allreduce bandwidth over loopback: 2 forked processes, f32 sum of 1-64 MB, minidl's gloo
// ProcessGroup (queue + communication thread + Work) against a raw gloo::allreduce loop on a
// context connected the same way, in the same processes. Prints a markdown table (rank 0).
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "bench_common.h"
#include "parallel/distributed.h"
#include "parallel/process_group/process_group.h"
#include "parallel/gloo/process_group_gloo.h"
#include "parallel/store/tcp_store.h"
#include "autograd/ops.h"

using namespace minidl;
using namespace minidl::dist;
using namespace std::chrono_literals;

namespace {

constexpr int kWorld = 2;

void run_rank(int rank, int port, bool quick) {
  auto store = std::make_shared<TcpStore>(
      TcpStoreOptions{.host = "127.0.0.1", .port = port, .timeout = 60000ms, .rank = rank});
  auto pg = make_process_group("gloo", store, rank, kWorld, {.timeout = 60000ms});
  auto raw = connect_gloo_context(store, rank, kWorld, "bench_raw/", 60000ms);
  if (rank == 0) {
    std::printf("| size | minidl GB/s | raw gloo GB/s | minidl / raw |\n");
    std::printf("|---:|---:|---:|---:|\n");
  }
  uint32_t tag = 0;
  for (int mb : {1, 4, 16, 64}) {
    const int64_t n = int64_t(mb) * (1 << 20) / 4;
    Tensor t = full({n}, 1.0 + rank, kFloat32);
    std::vector<float> buf(size_t(n), 1.0f + float(rank));
    auto ours = [&] { pg->allreduce(t)->wait(); };
    auto theirs = [&] {
      gloo::AllreduceOptions opts(raw);
      opts.setOutput(buf.data(), buf.size());
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      opts.setTag(++tag);
      gloo::allreduce(opts);
    };
    for (int w = 0; w < (quick ? 1 : 8); ++w) ours(), theirs();  // warm up buffers, TCP windows
    const int block = quick ? 2 : std::max(3, 128 / mb);
    std::vector<double> s = bench::time_alternating({ours, theirs}, quick ? 1 : 3, block);
    const double gb = double(n) * 4 / 1e9;
    if (rank == 0)
      std::printf("| %d MB | %.2f | %.2f | %.2f |\n", mb, gb / s[0], gb / s[1], s[1] / s[0]);
  }
  pg->barrier()->wait();
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  TcpStore master({.port = 0, .is_master = true, .timeout = 60000ms});
  std::vector<pid_t> pids;
  for (int r = 0; r < kWorld; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int code = 0;
      try {
        run_rank(r, master.port(), quick);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 1;
      }
      std::fflush(stdout);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return failed ? 1 : 0;
}
