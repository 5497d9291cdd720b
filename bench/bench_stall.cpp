// Cost of the stall inspector: the recorder's price per collective (inspector on vs off), and
// the 2-process DDP MNIST step (batch 64 per process, 1 thread) with the inspector on vs off in
// the same processes, in alternating blocks, as a ratio. Prints a markdown table.
// Usage: bench_stall [--steps 10] [--rounds 20] [--batch 64]
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "apps/mnist/model.h"
#include "bench_common.h"
#include "parallel/distributed.h"
#include "parallel/ddp/ddp.h"
#include "parallel/process_group/stall_inspector.h"
#include "parallel/store/tcp_store.h"

using namespace minidl;
using std::chrono::milliseconds;

namespace {

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

double cpu_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// ns per begin/end pair of the recorder (what the communication thread pays per collective).
double recorder_ns(milliseconds warn, dist::TcpStore& master) {
  auto store = std::make_shared<dist::TcpStore>(dist::TcpStoreOptions{.port = master.port()});
  dist::detail::StallInspector inspector(store, "bench" + std::to_string(warn.count()) + "/", 0, 1,
                                         warn);
  inspector.start("gloo");
  const std::string op = "allreduce";
  const int n = 2000000;
  std::vector<double> samples;
  for (int round = 0; round < 5; ++round) {
    const double t0 = bench::now_s();
    for (int i = 1; i <= n; ++i) {
      inspector.begin(uint64_t(i), op, 4096);
      inspector.end(uint64_t(i));
    }
    samples.push_back((bench::now_s() - t0) / n * 1e9);
  }
  return bench::median(samples);
}

// CPU seconds this process uses per wall second with an idle inspector publishing to a store
// hosted in the same process (its thread, plus the store server's share).
double background_cpu_per_s(dist::TcpStore& master) {
  auto store = std::make_shared<dist::TcpStore>(dist::TcpStoreOptions{.port = master.port()});
  dist::detail::StallInspector inspector(store, "idle/", 0, 1, milliseconds(60000));
  inspector.start("gloo");
  std::this_thread::sleep_for(milliseconds(1500));  // connected, publishing
  const double c0 = cpu_s(), t0 = bench::now_s();
  std::this_thread::sleep_for(milliseconds(10000));
  return (cpu_s() - c0) / (bench::now_s() - t0);
}

struct Result {
  double step_s[2], cpu_s[2];        // [off, on]: median step time, median CPU seconds per step
  double ratio, ratio_lo, ratio_hi;  // per-round step-time ratios on/off: median, quartiles
  double collectives_per_step;
};

// One SGD step of a DDP-wrapped MNIST CNN on a fixed batch.
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

// Rank r of 2: two groups, inspector off and on, each with its own DDP model; `rounds` rounds of
// a block of `steps` steps on each (the order alternates between rounds). Rank 0 fills `out`.
void run_rank(int r, int port, int steps, int rounds, int64_t batch, Result* out) {
  set_num_threads(1);
  auto store = std::make_shared<dist::TcpStore>(dist::TcpStoreOptions{.port = port});
  std::shared_ptr<dist::ProcessGroup> pg[2];
  std::unique_ptr<Trainer> trainer[2];
  for (int on = 0; on < 2; ++on) {
    dist::ProcessGroupOptions o;
    o.stall_warn = on ? milliseconds(60000) : milliseconds(0);
    pg[on] = dist::make_process_group("gloo", store, r, 2, o);
    manual_seed(uint64_t(r));
    trainer[on] = std::make_unique<Trainer>(
        std::make_shared<dist::DistributedDataParallel>(std::make_shared<mnist::Net>(), pg[on]),
        batch);
    for (int i = 0; i < 3; ++i) trainer[on]->step();
  }
  std::vector<double> times[2], cpu[2], ratios;
  const uint64_t seq0 = pg[1]->sequence_number();
  for (int round = 0; round < rounds; ++round) {
    double med[2];
    for (int k = 0; k < 2; ++k) {
      const int on = (round % 2) ? 1 - k : k;
      pg[on]->barrier()->wait();
      std::vector<double> block;
      const double c0 = cpu_s();
      for (int i = 0; i < steps; ++i) {
        const double t0 = bench::now_s();
        trainer[on]->step();
        block.push_back(bench::now_s() - t0);
      }
      cpu[on].push_back((cpu_s() - c0) / steps);
      times[on].insert(times[on].end(), block.begin(), block.end());
      med[on] = bench::median(block);
    }
    ratios.push_back(med[1] / med[0]);
  }
  const double per_step = double(pg[1]->sequence_number() - seq0 - uint64_t(rounds)) /
                          double(rounds * steps);  // minus the barriers
  std::sort(ratios.begin(), ratios.end());
  if (r == 0)
    *out = {{bench::median(times[0]), bench::median(times[1])},
            {bench::median(cpu[0]), bench::median(cpu[1])},
            bench::median(ratios),
            ratios[ratios.size() / 4],
            ratios[ratios.size() * 3 / 4],
            per_step};
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = bench::int_arg(argc, argv, "--steps", 10);
  const int rounds = bench::int_arg(argc, argv, "--rounds", 20);
  const int64_t batch = bench::int_arg(argc, argv, "--batch", 64);

  auto* res = static_cast<Result*>(
      ::mmap(nullptr, sizeof(Result), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  dist::TcpStore master({.port = 0, .is_master = true});
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int code = 0;
      try {
        run_rank(r, master.port(), steps, rounds, batch, res);
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
      std::fprintf(stderr, "bench_stall: a rank failed\n");
      return 1;
    }
  }
  const double off_ns = recorder_ns(milliseconds(0), master);
  const double on_ns = recorder_ns(milliseconds(60000), master);
  const double bg = background_cpu_per_s(master);
  const Result r = *res;
  const double share = (on_ns - off_ns) * 1e-9 * r.collectives_per_step / r.step_s[0];
  std::printf("## Stall inspector cost (DDP MNIST CNN, 2 processes, batch %lld, 1 thread)\n\n",
              (long long)batch);
  std::printf("| inspector | step ms (median) | CPU ms per step (rank 0) |\n|---|---:|---:|\n");
  std::printf("| off (stall_warn 0) | %.3f | %.3f |\n", r.step_s[0] * 1e3, r.cpu_s[0] * 1e3);
  std::printf("| on (stall_warn 60 s) | %.3f | %.3f |\n\n", r.step_s[1] * 1e3, r.cpu_s[1] * 1e3);
  std::printf("| measure | value |\n|---|---:|\n");
  std::printf("| step time on / off (median of %d paired blocks; quartiles) | %.4f (%.4f-%.4f) |\n",
              rounds, r.ratio, r.ratio_lo, r.ratio_hi);
  std::printf("| CPU time per step on / off | %.4f |\n", r.cpu_s[1] / r.cpu_s[0]);
  std::printf("| collectives per step | %.1f |\n", r.collectives_per_step);
  std::printf("| recorder begin+end, ns per collective (on / off) | %.1f / %.1f |\n", on_ns,
              off_ns);
  std::printf("| recorder share of the step (critical path) | %.5f%% |\n", share * 100);
  std::printf("| background thread + store server, CPU per second | %.1f us (%.4f%% of a core) |\n",
              bg * 1e6, bg * 100);
  std::printf("\n(%d rounds of %d steps per setting, alternating; nproc %u; load %s)\n", rounds,
              steps, std::thread::hardware_concurrency(), loadavg().c_str());
  return 0;
}
