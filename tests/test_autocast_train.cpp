// Suites autocast (CPU) and cuda_amp_autocast: the weight cast cache (one cast per parameter
// per region, version checks), fp32 gradients of fp32 parameters close to the fp32 run,
// backward inside a region (the engine turns autocast off), no re-casting inside a hooked
// frontend, DataParallel replicas inheriting the mode, and the CUDA policy on real tensors.
#include <doctest/doctest.h>

#include <atomic>

#include "autograd/grad_mode.h"
#include "nn/attention_functional.h"
#include "nn/linear_conv.h"
#include "nn/loss.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel_test_models.h"
#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "test_util.h"

using namespace minidl;
using amp::AutocastOp;
namespace F = minidl::nn::functional;

namespace {

Tensor rnd(const Shape& s, uint64_t seed, DType dt = kFloat32, Device dev = kCPU) {
  return testutil::random_tensor(s, kFloat32, seed, -1, 1).to(dt).to(dev);
}

// A composite with an fp32 policy whose body calls a lower-policy op (matmul): the hook's
// exclusion keeps the body from downcasting again.
Tensor fp32_composite(const Tensor& a, const Tensor& b) {
  if (auto ac = amp::autocast_inputs<AutocastOp::mse_loss>(a, b))
    return fp32_composite(ac[0], ac[1]);
  return matmul(a, b);
}

double max_rel(const Tensor& a, const Tensor& b) {
  Tensor d = abs(a.to(kFloat64) - b.to(kFloat64));
  return amax(d).item<double>() / std::max(1e-12, amax(abs(b.to(kFloat64))).item<double>());
}

}  // namespace

TEST_SUITE("autocast") {
  TEST_CASE("weight cache: a Linear used 3 times casts its parameters once per region") {
    manual_seed(1);
    nn::Linear lin(4, 3);
    const Tensor x = rnd({2, 4}, 1);
    amp::reset_autocast_cache_stats();
    {
      amp::autocast ac(DeviceType::cpu);
      for (int i = 0; i < 3; ++i) CHECK(lin.forward(x).dtype() == kBFloat16);
      auto s = amp::autocast_cache_stats();
      CHECK(s.weight_casts == 2);  // weight and bias
      CHECK(s.hits == 4);
      CHECK(s.casts == 3 + 2);  // the input (no parameter: never cached) every time
      CHECK(s.cached == 2);
      {
        amp::autocast nested(DeviceType::cpu);  // inner regions share the outer cache
        lin.forward(x);
      }
      CHECK(amp::autocast_cache_stats().weight_casts == 2);
      CHECK(amp::autocast_cache_stats().cached == 2);
      // An in-place update (new version) invalidates the cached cast.
      {
        NoGradGuard no_grad;
        mul_(lin.weight, 2.0);
      }
      Tensor y = lin.forward(x);
      CHECK(amp::autocast_cache_stats().weight_casts == 3);
      amp::autocast off(DeviceType::cpu, std::nullopt, false);
      Tensor ref = linear(x.to(kBFloat16), lin.weight.to(kBFloat16), lin.bias.to(kBFloat16));
      CHECK(equal(y, ref));
    }
    CHECK(amp::autocast_cache_stats().cached == 0);  // dropped with the outermost region
    {
      amp::autocast ac(DeviceType::cpu);
      lin.forward(x);
    }
    CHECK(amp::autocast_cache_stats().weight_casts == 5);  // a new region casts again
    {
      amp::autocast ac(DeviceType::cpu, std::nullopt, true, /*cache_enabled=*/false);
      lin.forward(x);
      lin.forward(x);
    }
    CHECK(amp::autocast_cache_stats().weight_casts == 5);
    CHECK(amp::autocast_cache_stats().hits == 4 + 2 + 1);
  }

  TEST_CASE("fp32 parameters get fp32 gradients close to the fp32 run, backward in a region") {
    manual_seed(2);
    nn::Linear l1(8, 16), l2(16, 4);
    const Tensor x = rnd({5, 8}, 3), y = rnd({5, 4}, 4);
    auto loss_fn = [&] { return F::mse_loss(l2.forward(relu(l1.forward(x))), y); };
    auto grads = [&] {
      std::vector<Tensor> g;
      for (nn::Linear* l : {&l1, &l2}) {
        g.push_back(l->weight.grad().clone());
        g.push_back(l->bias.grad().clone());
        l->weight.set_grad({});
        l->bias.set_grad({});
      }
      return g;
    };
    loss_fn().backward();
    const auto ref = grads();
    Tensor loss;
    {
      amp::autocast ac(DeviceType::cpu);
      loss = loss_fn();
      CHECK(loss.dtype() == kFloat32);  // mse_loss: fp32 policy on CPU
    }
    loss.backward();
    const auto got = grads();
    for (size_t i = 0; i < ref.size(); ++i) {
      CHECK(got[i].dtype() == kFloat32);
      CHECK(max_rel(got[i], ref[i]) < 3e-2);
    }
    bool hook_saw_autocast = true;
    {
      amp::autocast ac(DeviceType::cpu);
      Tensor h = l1.forward(x);
      CHECK(h.dtype() == kBFloat16);
      h.register_hook([&](const Tensor& g) {
        hook_saw_autocast = amp::is_autocast_enabled(DeviceType::cpu);
        CHECK(g.dtype() == kBFloat16);  // the forward's dtype
        return Tensor();
      });
      F::mse_loss(l2.forward(relu(h)), y).backward();  // inside the region
      CHECK(amp::is_autocast_enabled(DeviceType::cpu));
      CHECK(mm(x, l1.weight.t()).dtype() == kBFloat16);
    }
    CHECK_FALSE(hook_saw_autocast);
    const auto inside = grads();
    for (size_t i = 0; i < ref.size(); ++i) {
      CHECK(inside[i].dtype() == kFloat32);
      CHECK(max_rel(inside[i], got[i]) < 1e-6);
    }
  }

  TEST_CASE("exclusion: no re-casting inside a hooked frontend, and no leak") {
    const Tensor a = rnd({3, 4}, 1), b = rnd({4, 2}, 2);
    amp::autocast ac(DeviceType::cpu);
    CHECK(amp::detail::t_autocast_active);
    CHECK(fp32_composite(a, b).dtype() == kFloat32);  // the inner matmul stays fp32
    CHECK(fp32_composite(a.to(kBFloat16), b.to(kBFloat16)).dtype() == kFloat32);
    CHECK(matmul(a, b).dtype() == kBFloat16);  // the exclusion ended with the call
    // A hooked frontend that throws restores the flag too.
    CHECK_THROWS_AS(linear(a, rnd({5, 3}, 3)), Error);
    CHECK(amp::detail::t_autocast_active);
    CHECK(matmul(a, b).dtype() == kBFloat16);
    // Composite lower-policy attention: inputs cast once, the body runs in bf16.
    auto r = F::attention_with_weights(rnd({2, 3, 4}, 1), rnd({2, 5, 4}, 2), rnd({2, 5, 4}, 3));
    CHECK(r.output.dtype() == kBFloat16);
    CHECK(r.weights.dtype() == kBFloat16);
    {
      amp::autocast off(DeviceType::cpu, std::nullopt, false);
      CHECK_FALSE(amp::detail::t_autocast_active);  // the one flag the hook tests
    }
  }

  TEST_CASE("DataParallel replicas inherit the caller's autocast state") {
    manual_seed(5);
    auto src = std::make_shared<ptest::SmallNet>();
    dist::DataParallel dp(src, {kCPU, kCPU});
    const Tensor x = ptest::batch_x(0, 8);
    CHECK(dp.forward(x).dtype() == kFloat32);
    Tensor out;
    {
      amp::autocast ac(DeviceType::cpu);
      out = dp.forward(x);
      // cat promotes: one replica running without autocast would make this float32.
      CHECK(out.dtype() == kBFloat16);
    }
    CHECK(out.shape() == Shape{8, 10});
    F::cross_entropy(out, ptest::batch_y(0, 8)).backward();
    for (const Tensor& p : src->parameters()) {
      REQUIRE(p.grad().defined());
      CHECK(p.grad().dtype() == kFloat32);
    }
    CHECK_FALSE(amp::is_autocast_enabled(DeviceType::cpu));
  }
}

TEST_SUITE("cuda_amp_autocast") {
  TEST_CASE("CUDA policy on real tensors: lower, fp32, promote, none") {
    const Device gpu{DeviceType::cuda, 0};
    const Tensor a = rnd({8, 16}, 1, kFloat32, gpu), b = rnd({16, 4}, 2, kFloat32, gpu);
    amp::autocast ac(DeviceType::cuda);
    CHECK(mm(a, b).dtype() == kFloat16);
    CHECK(matmul(a, b).dtype() == kFloat16);
    CHECK(linear(a, b.t()).dtype() == kFloat16);
    const Tensor h = a.to(kFloat16);
    CHECK(softmax(h, -1).dtype() == kFloat32);
    CHECK(log_softmax(h, -1).dtype() == kFloat32);
    CHECK(exp(h).dtype() == kFloat32);
    CHECK(sum(h).dtype() == kFloat32);
    CHECK(layer_norm(h, {16}).out.dtype() == kFloat32);
    CHECK(F::mse_loss(h, h).dtype() == kFloat32);
    CHECK(cat({h, a}).dtype() == kFloat32);
    CHECK(mean(h).dtype() == kFloat16);  // unlisted: input dtype
    CHECK(relu(h).dtype() == kFloat16);
    CHECK(mm(a.cpu(), b.cpu()).dtype() == kFloat32);  // the CPU mode is off
    nn::Linear lin(16, 4);
    lin.to(gpu);
    Tensor loss = F::mse_loss(lin.forward(a), rnd({8, 4}, 3, kFloat32, gpu));
    CHECK(loss.dtype() == kFloat32);
    loss.backward();
    CHECK(lin.weight.grad().dtype() == kFloat32);
    amp::autocast bf(DeviceType::cuda, kBFloat16);
    CHECK(mm(a, b).dtype() == kBFloat16);
  }
}
