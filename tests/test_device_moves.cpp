// Device placement: the shared same-device check of the op frontends, Module::to in place
// (identities, grads, buffers), optimizer state on the parameter's device, and (suite
// cuda_optim, needs a GPU) the fused multi-tensor SGD/Adam(W) steps against the CPU reference,
// their state_dict and CUDA-graph capture.
#include <doctest/doctest.h>

#include <cmath>

#include "optim/fused.h"
#include "tensor/cuda_api.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {
// A "CUDA" tensor wrapping host memory: never read, so frontends must reject it before any
// kernel runs (works in a CPU-only build).
Tensor fake_cuda(std::vector<float>& mem, const Shape& shape) {
  return from_blob(mem.data(), shape, kFloat32, kCUDA);
}
}  // namespace

TEST_CASE("device_moves: check_same_device names the op and both devices") {
  const char* msg = "op `add`: expected all tensors on one device, got cpu and cuda:0";
  CHECK_THROWS_WITH_AS(check_same_device("add", kCPU, kCUDA), msg, Error);
  CHECK_NOTHROW(check_same_device("add", kCUDA, kCUDA));
  CHECK_NOTHROW(check_same_device("add", Tensor(), ones({2})));  // undefined: skipped
  std::vector<float> mem(6, 0.f);
  Tensor c = fake_cuda(mem, {2, 3}), x = ones({2, 3});
  CHECK(c.device() == kCUDA);
  CHECK_THROWS_WITH_AS(add(x, c), msg, Error);
  CHECK_THROWS_WITH_AS(mul(c, x),
                       "op `mul`: expected all tensors on one device, got cuda:0 and cpu", Error);
  CHECK_THROWS_WITH_AS(where(gt(x, 0), x, c), doctest::Contains("op `where`: expected all"), Error);
  CHECK_THROWS_WITH_AS(matmul(x, c.t()), doctest::Contains("got cpu and cuda:0"), Error);
  CHECK_THROWS_WITH_AS(linear(x, c), doctest::Contains("op `linear`: expected all"), Error);
  // Frontends with role-named messages still name both devices.
  CHECK_THROWS_WITH_AS(cat({x, c}), doctest::Contains("cuda:0"), Error);
  Tensor idx = zeros({2}, kInt64);
  CHECK_THROWS_WITH_AS(index_select(c, 0, idx), doctest::Contains("cuda:0"), Error);
}

TEST_CASE("device_moves: module.to(kCPU, f64) keeps parameter identities and grads") {
  // BatchNorm1d: parameters weight/bias, f32 buffers running_mean/var, an int64 buffer.
  auto net = std::make_shared<nn::BatchNorm1d>(3);
  Tensor x = random_tensor({4, 3}, kFloat32, 7);
  sum(mul(net->forward(x), x)).backward();
  std::vector<Tensor> params = net->parameters();
  REQUIRE(params.size() == 2);
  std::vector<TensorImpl*> impls, grad_impls;
  std::vector<std::vector<double>> grads;
  for (auto& p : params) {
    REQUIRE(p.grad().defined());
    impls.push_back(p.impl());
    grad_impls.push_back(p.grad().impl());
    grads.push_back(to_f64(p.grad()));
  }
  TensorImpl* mean_impl = net->running_mean.impl();
  std::vector<double> mean = to_f64(net->running_mean);
  optim::SGD opt(params, 0.5);  // holds the parameter handles across the move
  net->to(kCPU, kFloat64);
  std::vector<Tensor> after = net->parameters();
  REQUIRE(after.size() == params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    CHECK(after[i].impl() == impls[i]);
    CHECK(params[i].dtype() == kFloat64);
    CHECK(params[i].requires_grad());
    CHECK(params[i].is_leaf());
    CHECK(params[i].grad().impl() == grad_impls[i]);
    CHECK(params[i].grad().dtype() == kFloat64);
    check_close(params[i].grad(), grads[i], 0, 0);  // f32 -> f64 is exact
  }
  CHECK(net->running_mean.impl() == mean_impl);
  CHECK(net->running_mean.dtype() == kFloat64);
  check_close(net->running_mean, mean, 0, 0);
  CHECK(net->num_batches_tracked.dtype() == kInt64);  // not floating: unchanged
  // The optimizer's handles are the module's: a step changes the module.
  std::vector<double> w0 = to_f64(net->weight);
  opt.step();
  CHECK(opt.param_groups()[0].params[0].dtype() == kFloat64);
  std::vector<double> w1 = to_f64(net->weight);
  for (size_t i = 0; i < w0.size(); ++i) CHECK(w1[i] == doctest::Approx(w0[i] - 0.5 * grads[0][i]));
  // A later backward accumulates into the same (moved) leaves, in f64.
  net->zero_grad();
  Tensor x64 = x.to(kFloat64);
  sum(mul(net->forward(x64), x64)).backward();
  for (auto& p : params) CHECK(p.grad().dtype() == kFloat64);
  net->to(kCPU);  // a no-op move keeps everything
  CHECK(net->weight.impl() == impls[0]);
}

TEST_CASE("device_moves: optimizers default to fused and keep CPU params on the per-tensor path") {
  Tensor p = ones({3});
  p.requires_grad_();
  p.set_grad(full({3}, 2.0));
  optim::AdamW adam({p}, 0.1);
  optim::SGD sgd({p}, 0.1, 0.9);
  CHECK(adam.param_groups()[0].get("fused") == 1);
  CHECK(sgd.param_groups()[0].get("fused") == 1);
  CHECK_FALSE(optim::fused::usable({p}));
  CHECK_FALSE(optim::fused::usable({}));
  adam.step();
  auto sd = adam.state_dict();
  CHECK(sd.at("state.0.step").device() == kCPU);
  CHECK(sd.at("state.0.step").dtype() == kFloat64);
  CHECK(sd.at("state.0.step").item<double>() == 1.0);
  CHECK(sd.at("param_groups.0.fused").item<double>() == 1.0);
}

TEST_CASE("device_moves: clip_grad_norm_ combines per-grad norms like before") {
  Tensor a = ones({2}), b = ones({3});
  a.requires_grad_();
  b.requires_grad_();
  a.set_grad(from_f64({3, -4}, {2}));
  b.set_grad(from_f64({0, 12, 0}, {3}, kFloat64));
  CHECK(optim::clip_grad_norm_({a, b}, 1e9).item<double>() == doctest::Approx(13.0));
  CHECK(optim::clip_grad_norm_({a, b}, 1e9, 1.0).item<double>() == doctest::Approx(19.0));
  CHECK(optim::clip_grad_norm_({a, b}, 1e9, INFINITY).item<double>() == 12.0);
  b.set_grad(from_f64({0, NAN, 0}, {3}));
  CHECK(std::isnan(
      optim::clip_grad_norm_({a, b}, 1e9, INFINITY).item<double>()));  // NaN propagates (PyTorch)
  CHECK_THROWS_WITH_AS(optim::clip_grad_norm_({a, b}, 1.0, 2.0, true),
                       doctest::Contains("non-finite"), Error);
}

// ------------------------------------------------------------------------------- cuda_optim

namespace {
enum class Kind { sgd_nesterov, sgd_dampening, adam_l2, adamw, adamw_amsgrad };

std::unique_ptr<optim::Optimizer> make_opt(Kind k, std::vector<Tensor> ps) {
  switch (k) {
    case Kind::sgd_nesterov:
      return std::make_unique<optim::SGD>(ps, 0.05, 0.9, 0.0, 0.01, true);
    case Kind::sgd_dampening:
      return std::make_unique<optim::SGD>(ps, 0.05, 0.8, 0.25, 0.0, false);
    case Kind::adam_l2:
      return std::make_unique<optim::Adam>(ps, 0.01, std::pair{0.9, 0.99}, 1e-8, 0.05, false);
    case Kind::adamw:
      return std::make_unique<optim::AdamW>(ps, 0.01, std::pair{0.9, 0.999}, 1e-8, 0.1, false);
    case Kind::adamw_amsgrad:
      return std::make_unique<optim::AdamW>(ps, 0.01, std::pair{0.9, 0.999}, 1e-8, 0.1, true);
  }
  return nullptr;
}

// Shapes that exercise chunk tails, unaligned sizes, a zero-size tensor, a tensor over one
// chunk (65536) and more tensors than one launch holds (48).
std::vector<Shape> test_shapes() {
  std::vector<Shape> s = {{3, 5}, {0}, {65536 + 7}, {257}, {1}, {4, 64, 3, 3}};
  for (int i = 0; i < 50; ++i) s.push_back({int64_t(1 + 37 * i)});
  return s;
}

// max |got - want| / max(|want|, floor) per element. f32/f64 use floor 1e-6 (the fused kernels
// round like the CPU ops, so only near-exact results pass). f16/bf16 use the tensor's largest
// |want|: the CPU reference rounds every op to 8-11 bits while the fused kernel rounds once, so
// entries that cancel (m = b1*m + (1-b1)*g near 0) differ by an ulp of the terms, not of m.
double max_rel_err(const Tensor& got, const Tensor& want) {
  std::vector<double> a = to_f64(got), b = to_f64(want);
  double floor = 1e-6;
  if (want.dtype() == kFloat16 || want.dtype() == kBFloat16)
    for (double v : b) floor = std::max(floor, std::abs(v));
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(std::abs(b[i]), floor));
  return worst;
}

// Runs `steps` steps on CUDA (fused) and on the CPU (reference) with the same grads.
void fused_matches_cpu(Kind kind, DType dt, double tol) {
  std::vector<Tensor> cpu_p, gpu_p;
  uint64_t seed = 1;
  for (const Shape& s : test_shapes()) {
    Tensor c = random_tensor(s, dt, seed++);
    Tensor g = c.to(kCUDA);
    c.requires_grad_();
    g.requires_grad_();
    cpu_p.push_back(c);
    gpu_p.push_back(g);
  }
  auto cpu_opt = make_opt(kind, cpu_p), gpu_opt = make_opt(kind, gpu_p);
  for (int step = 0; step < 5; ++step) {
    for (size_t i = 0; i < cpu_p.size(); ++i) {
      if (step == 2 && i == 3) {  // a parameter without grad this step
        cpu_p[i].set_grad(Tensor());
        gpu_p[i].set_grad(Tensor());
        continue;
      }
      Tensor g = random_tensor(cpu_p[i].shape(), dt, 1000 * (step + 1) + i);
      cpu_p[i].set_grad(g);
      gpu_p[i].set_grad(g.to(kCUDA));
    }
    REQUIRE(optim::fused::usable(std::vector<Tensor>(gpu_p.begin(), gpu_p.begin() + 3)));
    cpu_opt->step();
    gpu_opt->step();
  }
  for (size_t i = 0; i < cpu_p.size(); ++i) {
    INFO("param ", i, " shape ", cpu_p[i].shape_str());
    CHECK(max_rel_err(gpu_p[i], cpu_p[i]) <= tol);
    for (const auto& [name, st] : cpu_opt->state(i)) {
      INFO("state ", name);
      const Tensor& gs = gpu_opt->state(i).at(name);
      if (name != "step") CHECK(gs.device() == kCUDA);
      CHECK(max_rel_err(gs, st) <= tol);
    }
  }
  // state_dict: same keys; steps as 0-d f64 CPU tensors.
  auto a = cpu_opt->state_dict(), b = gpu_opt->state_dict();
  CHECK(a.size() == b.size());
  for (const auto& [k, v] : a) {
    REQUIRE(b.count(k));
    if (k.find(".step") != std::string::npos) {
      CHECK(b.at(k).device() == kCPU);
      CHECK(b.at(k).item<double>() == v.item<double>());
    }
  }
}
}  // namespace

TEST_SUITE("cuda_optim") {
  TEST_CASE("cuda_optim: fused SGD equals the CPU step (f32, momentum, nesterov, wd)") {
    fused_matches_cpu(Kind::sgd_nesterov, kFloat32, 1e-6);
    fused_matches_cpu(Kind::sgd_dampening, kFloat32, 1e-6);
    fused_matches_cpu(Kind::sgd_nesterov, kFloat64, 1e-14);
  }

  TEST_CASE("cuda_optim: fused Adam/AdamW equal the CPU step (f32, amsgrad on/off)") {
    fused_matches_cpu(Kind::adamw, kFloat32, 1e-6);
    fused_matches_cpu(Kind::adamw_amsgrad, kFloat32, 1e-6);
    fused_matches_cpu(Kind::adam_l2, kFloat32, 1e-6);
    fused_matches_cpu(Kind::adamw_amsgrad, kFloat64, 1e-13);
  }

  TEST_CASE("cuda_optim: fused steps on f16/bf16 parameters stay close to the CPU") {
    fused_matches_cpu(Kind::adamw, kBFloat16, 2e-2);
    fused_matches_cpu(Kind::sgd_nesterov, kFloat16, 5e-3);
  }

  TEST_CASE("cuda_optim: optimizer state follows load_state_dict onto the device") {
    Tensor c = random_tensor({100}, kFloat32, 3);
    c.requires_grad_();
    c.set_grad(random_tensor({100}, kFloat32, 4));
    optim::AdamW cpu_opt({c}, 0.01, {0.9, 0.999}, 1e-8, 0.1, true);
    cpu_opt.step();
    Tensor g = c.detach().to(kCUDA);
    g.requires_grad_();
    g.set_grad(c.grad().to(kCUDA));
    optim::AdamW gpu_opt({g}, 0.01, {0.9, 0.999}, 1e-8, 0.1, true);
    gpu_opt.load_state_dict(cpu_opt.state_dict());
    CHECK(gpu_opt.state(0).at("exp_avg").device() == kCUDA);
    cpu_opt.step();
    gpu_opt.step();  // the CPU step count moves to the device
    CHECK(gpu_opt.state(0).at("step").device() == kCUDA);
    CHECK(gpu_opt.state_dict().at("state.0.step").item<double>() == 2.0);
    CHECK(max_rel_err(g, c) <= 1e-6);
  }

  TEST_CASE("cuda_optim: a graph-captured step replayed 3 times equals 3 eager steps") {
    for (Kind kind : {Kind::sgd_nesterov, Kind::adamw_amsgrad}) {
      std::vector<Tensor> eager_p, graph_p;
      for (int i = 0; i < 4; ++i) {
        Tensor c = random_tensor({int64_t(1000 + 4097 * i)}, kFloat32, 10 + i);
        Tensor gr = random_tensor(c.shape(), kFloat32, 20 + i).to(kCUDA);
        Tensor a = c.to(kCUDA), b = c.to(kCUDA);
        a.requires_grad_();
        b.requires_grad_();
        a.set_grad(gr);
        b.set_grad(gr.clone());  // static grads read by the captured kernels
        eager_p.push_back(a);
        graph_p.push_back(b);
      }
      auto eager = make_opt(kind, eager_p), graphed = make_opt(kind, graph_p);
      eager->step();  // warm-up: state is allocated outside the capture
      graphed->step();
      cuda::CUDAGraph graph;
      graph.capture_begin();
      graphed->step();
      graph.capture_end();
      for (int r = 0; r < 3; ++r) {
        const double lr = 0.02 * (r + 1);  // a scheduler's change reaches the replay
        eager->param_groups()[0].lr() = lr;
        graphed->param_groups()[0].lr() = lr;
        eager->step();
        graph.replay();
      }
      cuda::synchronize();
      for (size_t i = 0; i < eager_p.size(); ++i) CHECK(max_rel_err(graph_p[i], eager_p[i]) == 0);
      auto sd = graphed->state_dict();
      if (kind == Kind::adamw_amsgrad) CHECK(sd.at("state.0.step").item<double>() == 4.0);
    }
  }
}
