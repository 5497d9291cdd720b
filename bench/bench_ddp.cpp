// DDP on the classic MNIST CNN (batch 64 per process, 1 thread per process): throughput of 2
// DDP processes vs 1 plain process, the overhead of DDP at world size 1 vs the unwrapped
// model, and how much of the allreduce time backward hides. Prints a markdown table.
// Usage: bench_ddp [--steps 20] [--rounds 3] [--batch 64]
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <time.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "apps/mnist/model.h"
#include "bench_common.h"
#include "parallel/distributed.h"
#include "parallel/ddp/ddp.h"
#include "parallel/store/tcp_store.h"

using namespace minidl;

namespace {

// CPU seconds used by this process (all its threads, incl. gloo's).
double cpu_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

// One SGD training step of `model` on a fixed random batch.
struct Trainer {
  std::shared_ptr<nn::Module> model;
  optim::SGD opt;
  Tensor x, y;
  Trainer(std::shared_ptr<nn::Module> m, int64_t batch)
      : model(std::move(m)),
        opt(model->parameters(), 0.01, 0.5),
        x(randn({batch, 1, 28, 28})),
        y(randint(0, 10, {batch})) {}
  void step() {
    opt.zero_grad();
    nn::functional::nll_loss(model->forward(x), y).backward();
    opt.step();
  }
};

struct RankResult {
  double step_s, comm_s, exposed_s, buckets, cpu_step_s, hidden;
};

// DDP over `world` forked processes; returns rank 0's median step time and mean comm stats.
RankResult run_ddp_processes(int world, int steps, int64_t batch) {
  auto* out =
      static_cast<RankResult*>(::mmap(nullptr, sizeof(RankResult) * size_t(world),
                                      PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  dist::TcpStore master({.port = 0, .is_master = true});
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int code = 0;
      try {
        set_num_threads(1);
        manual_seed(uint64_t(r));
        auto store = std::make_shared<dist::TcpStore>(dist::TcpStoreOptions{.port = master.port()});
        auto pg = dist::make_process_group("gloo", store, r, world);
        auto ddp =
            std::make_shared<dist::DistributedDataParallel>(std::make_shared<mnist::Net>(), pg);
        Trainer t(ddp, batch);
        for (int i = 0; i < 3; ++i) t.step();
        pg->barrier()->wait();
        std::vector<double> times;
        ddp->reset_stats();  // the timed steps only
        const double c0 = cpu_s();
        for (int i = 0; i < steps; ++i) {
          double t0 = bench::now_s();
          t.step();
          times.push_back(bench::now_s() - t0);
        }
        const double cpu_step = (cpu_s() - c0) / steps;
        const dist::DDPStats st = ddp->stats();
        out[r] = {bench::median(times),
                  st.comm_seconds / double(st.steps),
                  st.exposed_seconds / double(st.steps),
                  double(st.num_buckets),
                  cpu_step,
                  st.hidden_fraction()};
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 1;
      }
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  for (pid_t p : pids) {
    int status = 0;
    ::waitpid(p, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "bench_ddp: a rank failed\n");
      std::exit(1);
    }
  }
  RankResult r = out[0];
  ::munmap(out, sizeof(RankResult) * size_t(world));
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = bench::int_arg(argc, argv, "--steps", 20);
  const int rounds = bench::int_arg(argc, argv, "--rounds", 3);
  const int64_t batch = bench::int_arg(argc, argv, "--batch", 64);
  const std::string load_before = loadavg();

  // 2 DDP processes first (before this process starts any threads of its own).
  RankResult ddp2 = run_ddp_processes(2, steps, batch);

  // 1 process: the plain model and DDP at world size 1, timed in alternating blocks.
  set_num_threads(1);
  manual_seed(0);
  Trainer plain(std::make_shared<mnist::Net>(), batch);
  dist::TcpStore store1({.port = 0, .is_master = true});
  auto pg1 = dist::make_process_group(
      "gloo", std::make_shared<dist::TcpStore>(dist::TcpStoreOptions{.port = store1.port()}), 0, 1);
  Trainer wrapped(
      std::make_shared<dist::DistributedDataParallel>(std::make_shared<mnist::Net>(), pg1), batch);
  std::vector<double> t = bench::time_alternating({[&] { plain.step(); }, [&] { wrapped.step(); }},
                                                  rounds, std::max(steps / rounds, 3));
  const double t1 = t[0], tw1 = t[1];
  const double c0 = cpu_s();
  for (int i = 0; i < steps; ++i) plain.step();
  const double cpu1 = (cpu_s() - c0) / steps;

  const double thr1 = double(batch) / t1, thr2 = 2.0 * double(batch) / ddp2.step_s;
  std::printf("## DDP on the MNIST CNN (batch %lld per process, 1 thread per process)\n\n",
              (long long)batch);
  std::printf("| configuration | step ms (median) | samples/s | vs 1 process |\n");
  std::printf("|---|---:|---:|---:|\n");
  std::printf("| 1 process, plain model | %.2f | %.0f | 1.00x |\n", t1 * 1e3, thr1);
  std::printf("| 1 process, DDP world size 1 | %.2f | %.0f | overhead %+.1f%% |\n", tw1 * 1e3,
              double(batch) / tw1, (tw1 / t1 - 1) * 100);
  std::printf("| DDP 2 processes (gloo) | %.2f | %.0f | %.2fx throughput |\n\n", ddp2.step_s * 1e3,
              thr2, thr2 / thr1);
  // On a loaded machine the wall-clock speedup says little; CPU time per step does not depend
  // on how many cores the processes got: 2 * cpu(1 process) / cpu(one DDP rank) is the
  // speedup two idle cores would give (waiting for communication costs no CPU).
  std::printf("| CPU time per step | ms |\n|---|---:|\n");
  std::printf("| 1 process, plain model | %.2f |\n", cpu1 * 1e3);
  std::printf("| DDP rank 0 of 2 (compute, bucket copies, gloo) | %.2f |\n", ddp2.cpu_step_s * 1e3);
  std::printf("| speedup on 2 idle cores (2 x plain / rank) | %.2fx |\n\n",
              2 * cpu1 / ddp2.cpu_step_s);
  std::printf("| DDP 2 processes: allreduce | value |\n|---|---:|\n");
  std::printf("| buckets | %.0f |\n", ddp2.buckets);
  std::printf("| comm time per step (first launch -> all done), ms | %.2f |\n", ddp2.comm_s * 1e3);
  std::printf("| exposed after backward (callback -> all done), ms | %.2f |\n",
              ddp2.exposed_s * 1e3);
  std::printf("| fraction hidden behind backward | %.0f%% |\n\n", 100 * ddp2.hidden);
  std::printf("- load average before: %s, after: %s (nproc %u)\n", load_before.c_str(),
              loadavg().c_str(), std::thread::hardware_concurrency());
  return 0;
}
