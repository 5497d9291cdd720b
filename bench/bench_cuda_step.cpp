// The mnist_ddp training step on a GPU (apps/mnist/model.h Net, NLL loss on its log_softmax,
// AdamW lr 2e-3 as mnist_ddp's defaults), data already on the device: eager ms/step and
// --cuda-graph ms/step (apps/mnist/graph.h, the code mnist_ddp runs) at batch 64 and 512, and
// the peak GPU memory of each. One JSON line per configuration.
// Usage: bench_cuda_step [--steps 50] [--rounds 7] [--warmup 5] [--device 0] [--tf32]
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "apps/mnist/graph.h"
#include "apps/mnist/model.h"
#include "bench_common.h"

using namespace minidl;

namespace {

struct Config {
  int64_t batch;
  bool graph;
};

struct Measured {
  double ms_per_step = 0, peak_mib = 0, last_loss = 0;
};

// Median over `rounds` of the mean step time of `steps` steps. A round is bracketed by
// cuda::synchronize, so it measures the device time of the steps including any host-side gaps
// (launch overhead) the GPU waits on; the steps inside a round do not synchronise.
Measured run(const Config& c, int index, int steps, int rounds, int warmup) {
  const Device dev(DeviceType::cuda, index);
  cuda::synchronize(index);
  cuda::reset_peak_memory_stats(index);
  manual_seed(1);
  auto model = std::make_shared<mnist::Net>();
  model->to(dev);
  model->train();
  optim::AdamW opt(model->parameters(), 2e-3, {0.9, 0.999}, 1e-8, 0.0);
  // A few distinct batches already on the GPU, cycled through: x:[B,1,28,28], y:[B].
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 4; ++i) {
    xs.push_back(randn({c.batch, 1, 28, 28}, kFloat32, dev));
    ys.push_back(randint(0, 10, {c.batch}, kInt64, dev));
  }
  // Eager steps go through the same CudaGraphStep with the graph never reached (warm-up larger
  // than every step count), so both modes pay the same per-step loss accumulation.
  const int64_t eager_forever = int64_t(1) << 62;
  mnist::CudaGraphStep step(*model, opt, dev, c.batch, c.graph ? warmup : eager_forever);
  int64_t k = 0;
  auto one = [&] {
    step.step(xs[size_t(k % 4)], ys[size_t(k % 4)]);
    ++k;
  };
  // Warm-up (and, in graph mode, the capture and its first replay).
  for (int i = 0; i < warmup + 2; ++i) one();
  cuda::synchronize(index);
  std::vector<double> per_round;
  for (int r = 0; r < rounds; ++r) {
    cuda::synchronize(index);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) one();
    cuda::synchronize(index);
    per_round.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
        steps);
  }
  Measured m;
  m.ms_per_step = bench::median(per_round);
  m.peak_mib = double(cuda::memory_stats(index).peak_allocated) / (1 << 20);
  m.last_loss = step.loss_sum() / double(k);
  if (c.graph)
    MINIDL_CHECK(step.replays() >= int64_t(rounds) * steps, "graph mode replayed only ",
                 step.replays(), " steps");
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = bench::int_arg(argc, argv, "--steps", 50);
  const int rounds = bench::int_arg(argc, argv, "--rounds", 7);
  const int warmup = bench::int_arg(argc, argv, "--warmup", 5);
  const int index = bench::int_arg(argc, argv, "--device", 0);
  const bool tf32 = bench::flag_arg(argc, argv, "--tf32");
  if (!cuda::is_available()) {
    std::fprintf(stderr, "bench_cuda_step: no CUDA device (%s)\n",
                 cuda::is_built() ? "none visible" : "built without CUDA");
    return 1;
  }
  try {
    cuda::set_device(index);
    cuda::set_allow_tf32(tf32);
    cuda::set_cudnn_benchmark(true);  // timed algorithms, as the torch side's benchmark mode
    const std::string name = cuda::get_device_properties(index).name;
    for (int64_t batch : {64, 512})
      for (bool graph : {false, true}) {
        Measured m = run({batch, graph}, index, steps, rounds, warmup);
        std::printf(
            "{\"bench\":\"mnist_step\",\"impl\":\"minidl\",\"mode\":\"%s\",\"batch\":%lld,"
            "\"ms_per_step\":%.4f,\"samples_per_s\":%.0f,\"peak_mib\":%.1f,\"mean_loss\":%.4f,"
            "\"steps\":%d,\"rounds\":%d,\"tf32\":%s,\"device\":\"%s\"}\n",
            graph ? "cuda_graph" : "eager", (long long)batch, m.ms_per_step,
            double(batch) / (m.ms_per_step * 1e-3), m.peak_mib, m.last_loss, steps, rounds,
            tf32 ? "true" : "false", name.c_str());
        std::fflush(stdout);
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_step: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
