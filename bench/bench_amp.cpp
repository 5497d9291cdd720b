// The mnist_ddp training step (the classic MNIST CNN, batch 64, AdamW) in fp32 and under
// mixed precision (autocast bf16 at O1; fp16 O1 with a GradScaler), alternating in one
// process so the ratios share the machine's state. Prints markdown rows (ms per step).
// Usage: bench_amp [--threads 2] [--rounds 5] [--steps 20]
#include <cstdio>
#include <memory>

#include "../apps/mnist/model.h"
#include "bench_common.h"
#include "minidl.h"
#include "optim/amp.h"

using namespace minidl;

namespace {

struct Run {
  const char* name;
  std::shared_ptr<mnist::Net> model;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<amp::Amp> amp;  // null: plain fp32
  std::vector<double> round_ms;
};

Run make_run(const char* name, const char* level, DType dtype) {
  manual_seed(0);
  Run r{name, std::make_shared<mnist::Net>(), nullptr, nullptr, {}};
  r.model->train();
  r.opt = std::make_unique<optim::AdamW>(r.model->parameters(), 1e-3);
  if (level) r.amp = amp::initialize(*r.model, *r.opt, level, dtype);
  return r;
}

void step(Run& r, const Tensor& x, const Tensor& y) {
  r.opt->zero_grad();
  if (!r.amp) {
    nn::functional::nll_loss(r.model->forward(x), y).backward();
    r.opt->step();
    return;
  }
  Tensor loss;
  {
    auto region = r.amp->autocast_region();
    loss = nn::functional::nll_loss(r.amp->forward(*r.model, x), y);
  }
  r.amp->backward(loss);
  r.amp->step();
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = bench::int_arg(argc, argv, "--threads", 2);
  const int rounds = bench::int_arg(argc, argv, "--rounds", 5);
  const int steps = bench::int_arg(argc, argv, "--steps", 20);
  set_num_threads(threads);
  Tensor x = randn({64, 1, 28, 28});
  Tensor y = randint(0, 10, {64});
  std::vector<Run> runs;
  runs.push_back(make_run("fp32", nullptr, kFloat32));
  runs.push_back(make_run("bf16 autocast (O1)", "O1", kBFloat16));
  runs.push_back(make_run("fp16 autocast + GradScaler (O1)", "O1", kFloat16));
  for (Run& r : runs)
    for (int i = 0; i < 3; ++i) step(r, x, y);  // warm-up
  for (int k = 0; k < rounds; ++k)
    for (Run& r : runs) {  // alternate: each round times every variant once
      std::vector<double> s;
      for (int i = 0; i < steps; ++i) {
        const double t0 = bench::now_s();
        step(r, x, y);
        s.push_back(bench::now_s() - t0);
      }
      r.round_ms.push_back(bench::median(s) * 1e3);
    }
  const double base = bench::median(runs[0].round_ms);
  std::printf("| impl | variant | threads | ms/step | vs own fp32 |\n|---|---|---|---|---|\n");
  for (Run& r : runs) {
    const double ms = bench::median(r.round_ms);
    std::printf("| minidl | %s | %d | %.2f | %.2f |\n", r.name, threads, ms, ms / base);
  }
  return 0;
}
