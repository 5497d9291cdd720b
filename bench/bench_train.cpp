// One training step of the classic MNIST CNN (batch 64, SGD momentum) built from nn/ and optim/,
// plus the per-op dispatch overhead of tiny add/relu calls. Prints markdown table rows.
// Usage: bench_train [--threads 2] [--rounds 5] [--steps 20] [--breakdown]
#include <cstdio>
#include <memory>

#include "bench_common.h"
#include "autograd/grad_mode.h"
#include "minidl.h"

using namespace minidl;

namespace {

// x:[64,1,28,28] -> conv(32) -> relu -> conv(64) -> relu -> maxpool 2 -> dropout .25 ->
// flatten [64,9216] -> fc 128 -> relu -> dropout .5 -> fc 10
std::shared_ptr<nn::Sequential> make_model() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(1, 32, 3), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Conv2d>(32, 64, 3), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Dropout>(0.25),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(9216, 128),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.5),
      std::make_shared<nn::Linear>(128, 10)});
}

// Median ns per call of fn over `rounds` blocks of `n` calls.
template <class F>
double ns_per_call(F&& fn, int rounds, int n) {
  std::vector<double> s;
  for (int i = 0; i < 1000; ++i) fn();
  for (int r = 0; r < rounds; ++r) {
    double t0 = bench::now_s();
    for (int i = 0; i < n; ++i) fn();
    s.push_back((bench::now_s() - t0) / n * 1e9);
  }
  return bench::median(s);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = bench::int_arg(argc, argv, "--threads", 2);
  int rounds = bench::int_arg(argc, argv, "--rounds", 5);
  int steps = bench::int_arg(argc, argv, "--steps", 20);
  bool breakdown = bench::flag_arg(argc, argv, "--breakdown");
  set_num_threads(threads);

  auto model = make_model();
  model->train();
  optim::SGD opt(model->parameters(), 0.01, 0.9);
  Tensor x = randn({64, 1, 28, 28});
  Tensor y = randint(0, 10, {64});

  double t_fwd = 0, t_bwd = 0, t_opt = 0;
  auto step = [&] {
    double t0 = bench::now_s();
    Tensor loss = nn::functional::cross_entropy((*model)(x), y);
    double t1 = bench::now_s();
    opt.zero_grad();
    loss.backward();
    double t2 = bench::now_s();
    opt.step();
    double t3 = bench::now_s();
    t_fwd += t1 - t0, t_bwd += t2 - t1, t_opt += t3 - t2;
  };
  for (int i = 0; i < 3; ++i) step();  // warm-up
  std::vector<double> per_round;
  t_fwd = t_bwd = t_opt = 0;
  for (int r = 0; r < rounds; ++r) {
    std::vector<double> s;
    for (int i = 0; i < steps; ++i) {
      double t0 = bench::now_s();
      step();
      s.push_back(bench::now_s() - t0);
    }
    per_round.push_back(bench::median(s));
  }
  double ms = bench::median(per_round) * 1e3;
  double n_steps = double(rounds) * steps;

  Tensor a = ones({1}), b = ones({1});
  Tensor ag = ones({1}).requires_grad_(), bg = ones({1}).requires_grad_();
  double ns_add = ns_per_call([&] { Tensor c = add(a, b); }, 7, 20000);
  double ns_add_grad = ns_per_call([&] { Tensor c = add(ag, bg); }, 7, 20000);
  double ns_relu = ns_per_call([&] { Tensor c = relu(a); }, 7, 20000);

  std::printf(
      "| impl | threads | ms/step | add ns (no grad) | add ns (requires_grad) | relu ns |\n");
  std::printf("|---|---|---|---|---|---|\n");
  std::printf("| minidl | %d | %.2f | %.0f | %.0f | %.0f |\n", threads, ms, ns_add, ns_add_grad,
              ns_relu);
  if (breakdown) {
    std::printf("\n| part (minidl, mean over timed steps) | ms |\n|---|---|\n");
    std::printf("| forward + loss | %.2f |\n| zero_grad + backward | %.2f |\n| SGD step | %.2f |\n",
                t_fwd / n_steps * 1e3, t_bwd / n_steps * 1e3, t_opt / n_steps * 1e3);
    // Per-layer forward times (no grad recording differences: grad mode on, as in training).
    std::printf("\n| layer forward (minidl) | ms |\n|---|---|\n");
    Tensor h = x;
    for (int64_t i = 0; i < model->size(); ++i) {
      auto m = (*model)[i];
      Tensor in = h;
      std::vector<double> s;
      for (int k = 0; k < 10; ++k) {
        double t0 = bench::now_s();
        h = (*m)(in);
        s.push_back(bench::now_s() - t0);
      }
      std::printf("| %lld %s | %.3f |\n", (long long)i, m->name().c_str(), bench::median(s) * 1e3);
    }
  }
  return 0;
}
