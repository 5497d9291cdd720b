// Suite cuda_runtime: Philox parity CPU vs CUDA (bit-exact uniform/bernoulli/randint, normal
// within rounding), the caching allocator's steady state and statistics, device guard and
// properties, error messages, and CUDA graphs replaying training steps exactly like eager mode.
#include <algorithm>
#include <string>

#include "apps/mnist/model.h"
#include "tensor/cuda_api.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {

const std::vector<int64_t> kSizes = {1, 3, 4, 5, 7, 1000, 1001, 4099, (1 << 20) + 3};
constexpr int64_t kMiB = 1 << 20;

// Runs draw(dev, gen) on CPU and CUDA from generators seeded alike; checks the values with
// check_close (rtol = atol = 0: bit-exact) and that both generators end at the same offset.
template <typename F>
void philox_parity(F draw, double rtol = 0, uint64_t seed = 1234) {
  Generator g_cpu(seed), g_cuda(seed);
  Tensor a = draw(kCPU, &g_cpu);
  Tensor b = draw(kCUDA, &g_cuda);
  REQUIRE(b.is_cuda());
  CHECK(b.dtype() == a.dtype());
  check_close(b.cpu(), a, rtol, rtol);
  CHECK(g_cpu.offset() == g_cuda.offset());
  CHECK(g_cpu.seed() == g_cuda.seed());
}

// The tensor's bytes in the allocator (blocks are rounded up, so compare with >=).
int64_t allocated() {
  cuda::synchronize();
  return cuda::memory_stats().allocated;
}

std::shared_ptr<nn::Sequential> small_mlp() {
  return std::make_shared<nn::Sequential>(
      nn::Sequential{std::make_shared<nn::Linear>(32, 64), std::make_shared<nn::ReLU>(),
                     std::make_shared<nn::Dropout>(0.2), std::make_shared<nn::Linear>(64, 10)});
}

// Batch `step` of a deterministic stream of inputs x:[B, in...] and labels y:[B] on the CPU.
std::pair<Tensor, Tensor> batch(const Shape& x_shape, int step) {
  Tensor x = random_tensor(x_shape, kFloat32, 1000 + uint64_t(step), -1, 1);
  Tensor y = random_tensor({x_shape[0]}, kInt64, 2000 + uint64_t(step), 0, 10);
  return {x, y};
}

// One eager training step on the given (static) inputs; returns the loss tensor.
Tensor train_step(nn::Module& model, optim::Optimizer& opt, const Tensor& x, const Tensor& y) {
  opt.zero_grad();
  Tensor loss = nn::functional::cross_entropy(model.forward(x), y);
  loss.backward();
  opt.step();
  return loss;
}

// Trains `make()`'s model (initial state `init`, dropout seed 77) for `warmup` eager steps, then
// `steps` more either eagerly or by replaying one captured step; returns per-step losses (of
// the last `steps`) and the final parameters (f64, CPU).
template <typename Make>
std::pair<std::vector<double>, std::vector<std::vector<double>>> run_training(
    Make make, const nn::StateDict& init, const Shape& x_shape, int warmup, int steps, bool graph,
    uint64_t* gen_offset) {
  cuda::CUDAGraph g;  // declared first: outlives the model, whose grads live in its pool
  auto model = make();
  REQUIRE(model->load_state_dict(init).missing_keys.empty());
  model->to(kCUDA);
  model->train();
  optim::AdamW opt(model->parameters(), 1e-3, {0.9, 0.999}, 1e-8, 0.01);
  manual_seed(77);
  Tensor xs = empty(x_shape, kFloat32, kCUDA), ys = empty({x_shape[0]}, kInt64, kCUDA);
  auto load = [&](int s) {
    auto [x, y] = batch(x_shape, s);
    xs.copy_(x);
    ys.copy_(y);
  };
  for (int s = 0; s < warmup; ++s) {
    load(s);
    train_step(*model, opt, xs, ys);
  }
  std::vector<double> losses;
  if (!graph) {
    for (int s = warmup; s < warmup + steps; ++s) {
      load(s);
      losses.push_back(train_step(*model, opt, xs, ys).template item<double>());
    }
  } else {
    cuda::synchronize();
    CHECK_FALSE(cuda::is_capturing());
    g.capture_begin();
    CHECK(cuda::is_capturing());
    Tensor loss = train_step(*model, opt, xs, ys);  // static output
    g.capture_end();
    CHECK_FALSE(cuda::is_capturing());
    CHECK(g.captured());
    for (int s = warmup; s < warmup + steps; ++s) {
      load(s);
      g.replay();
      losses.push_back(loss.template item<double>());
    }
  }
  cuda::synchronize();
  *gen_offset = default_generator().offset();
  std::vector<std::vector<double>> params;
  for (const Tensor& p : model->parameters()) params.push_back(to_f64(p));
  return {losses, params};
}

// Captured replays vs eager steps from the same state and seed: equal losses and parameters
// (1e-6 relative to each tensor's largest entry), and the generator advanced alike.
template <typename Make>
void check_graph_matches_eager(Make make, const Shape& x_shape, int warmup, int steps) {
  manual_seed(5);
  nn::StateDict init;
  for (auto& [k, v] : make()->state_dict()) init[k] = v.clone();
  uint64_t off_eager = 0, off_graph = 0;
  auto eager = run_training(make, init, x_shape, warmup, steps, false, &off_eager);
  auto graph = run_training(make, init, x_shape, warmup, steps, true, &off_graph);
  CHECK(off_eager == off_graph);
  check_close(from_f64(graph.first, {int64_t(steps)}, kFloat64), eager.first, 1e-6, 1e-7);
  REQUIRE(eager.second.size() == graph.second.size());
  for (size_t t = 0; t < eager.second.size(); ++t) {
    CAPTURE(t);
    const auto& e = eager.second[t];
    double scale = 0;
    for (double v : e) scale = std::max(scale, std::abs(v));
    Tensor got = from_f64(graph.second[t], {int64_t(e.size())}, kFloat64);
    check_close(got, e, 1e-6, 1e-6 * scale);
  }
}

}  // namespace

TEST_SUITE("cuda_runtime") {
  TEST_CASE("cuda philox: uniform is bit-exact vs CPU for every float dtype and size") {
    for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64})
      for (int64_t n : kSizes) {
        CAPTURE(dt);
        CAPTURE(n);
        philox_parity([&](Device d, Generator* g) { return rand({n}, dt, d, g); });
        philox_parity([&](Device d, Generator* g) {
          Tensor t = zeros({n, 3}, dt, d).t();  // non-contiguous destination
          uniform_(t, -3, 5, g);
          return t;
        });
      }
  }

  TEST_CASE("cuda philox: bernoulli, dropout masks and randint are bit-exact vs CPU") {
    for (int64_t n : kSizes) {
      CAPTURE(n);
      for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
        CAPTURE(dt);
        philox_parity([&](Device d, Generator* g) { return bernoulli({n}, 0.3, dt, d, g); });
        philox_parity([&](Device d, Generator* g) { return dropout_mask({n}, 0.25, dt, d, g); });
      }
      philox_parity([&](Device d, Generator* g) { return randint(-5, 17, {n}, kInt64, d, g); });
      philox_parity([&](Device d, Generator* g) { return randint(0, 100, {n}, kInt32, d, g); });
      // a range above 2^32 takes the 64-bit path
      philox_parity([&](Device d, Generator* g) {
        return randint(-(int64_t(1) << 40), int64_t(1) << 41, {n}, kInt64, d, g);
      });
    }
  }

  TEST_CASE("cuda philox: normal matches CPU (f64 to 1e-12, others to one rounding)") {
    for (int64_t n : kSizes) {
      CAPTURE(n);
      philox_parity([&](Device d, Generator* g) { return randn({n}, kFloat64, d, g); }, 1e-12);
      philox_parity([&](Device d, Generator* g) { return randn({n}, kFloat32, d, g); }, 2e-7);
      philox_parity([&](Device d, Generator* g) { return randn({n}, kFloat16, d, g); }, 1e-3);
      philox_parity([&](Device d, Generator* g) { return randn({n}, kBFloat16, d, g); }, 8e-3);
      philox_parity(
          [&](Device d, Generator* g) {
            Tensor t = empty({n}, kFloat64, d);
            normal_(t, 2.5, 0.5, g);
            return t;
          },
          1e-12);
    }
  }

  TEST_CASE("cuda philox: the default generator continues identically across devices") {
    manual_seed(99);
    Tensor a1 = rand({37}, kFloat32, kCPU), a2 = randn({5, 9}, kFloat64, kCPU);
    uint64_t off = default_generator().offset();
    manual_seed(99);
    Tensor b1 = rand({37}, kFloat32, kCUDA), b2 = randn({5, 9}, kFloat64, kCUDA);
    CHECK(default_generator().offset() == off);
    CHECK(equal(b1.cpu(), a1));
    check_close(b2.cpu(), a2, 1e-12, 1e-12);
    CHECK_FALSE(equal(b1.cpu(), rand({37})));  // the stream moved on
  }

  TEST_CASE("cuda allocator: a training step reaches a steady state without cudaMalloc") {
    manual_seed(3);
    auto model = small_mlp();
    model->to(kCUDA);
    optim::AdamW opt(model->parameters());
    auto [x, y] = batch({16, 32}, 0);
    Tensor xc = x.cuda(), yc = y.cuda();
    auto step = [&] { train_step(*model, opt, xc, yc); };  // temporaries die in the call
    step();
    int64_t base = allocated();
    cuda::AllocatorStats s0 = cuda::memory_stats();
    CHECK(s0.num_allocs > 0);
    for (int i = 0; i < 10; ++i) {
      step();
      CHECK(allocated() == base);
    }
    cuda::AllocatorStats s1 = cuda::memory_stats();
    CHECK(s1.num_device_allocs == s0.num_device_allocs);
    CHECK(s1.num_device_frees == s0.num_device_frees);
    CHECK(s1.num_allocs > s0.num_allocs);
    CHECK(s1.num_cache_hits - s0.num_cache_hits == s1.num_allocs - s0.num_allocs);
    CHECK(s1.reserved == s0.reserved);
    CHECK(s1.num_ooms == 0);
  }

  TEST_CASE("cuda allocator: peak statistics, reset and empty_cache") {
    cuda::synchronize();
    cuda::reset_peak_memory_stats();
    cuda::AllocatorStats s0 = cuda::memory_stats();
    CHECK(s0.peak_allocated == s0.allocated);
    CHECK(s0.peak_reserved == s0.reserved);
    CHECK(s0.reserved >= s0.allocated);
    {
      Tensor big = empty({64 * kMiB / 4}, kFloat32, kCUDA);  // 64 MiB
      big.fill_(1.5);
      cuda::AllocatorStats s1 = cuda::memory_stats();
      CHECK(s1.allocated >= s0.allocated + 64 * kMiB);
      CHECK(s1.peak_allocated >= s1.allocated);
      CHECK(s1.reserved >= s1.allocated);
      CHECK(sum(big).item<double>() == doctest::Approx(1.5 * 16 * kMiB));
    }
    int64_t before_empty;
    {
      cuda::AllocatorStats s2 = cuda::memory_stats();
      CHECK(s2.allocated == s0.allocated);                   // freed
      CHECK(s2.peak_allocated >= s0.allocated + 64 * kMiB);  // the peak stays
      CHECK(s2.reserved >= s0.allocated + 64 * kMiB);        // cached, not released
      before_empty = s2.reserved;
      cuda::reset_peak_memory_stats();
      cuda::AllocatorStats s3 = cuda::memory_stats();
      CHECK(s3.peak_allocated == s3.allocated);
      CHECK(s3.peak_reserved == s3.reserved);
    }
    int64_t frees = cuda::memory_stats().num_device_frees;
    cuda::empty_cache();
    cuda::AllocatorStats s4 = cuda::memory_stats();
    CHECK(s4.reserved <= before_empty - 64 * kMiB);
    CHECK(s4.num_device_frees > frees);
    CHECK(s4.allocated == s0.allocated);
    // the allocator still works after releasing its cache
    Tensor t = full({1000}, 2.0, kFloat32, kCUDA);
    CHECK(sum(t).item<double>() == 2000.0);
  }

  TEST_CASE("cuda runtime: device guard, properties, set_device errors") {
    const int n = cuda::device_count();
    REQUIRE(n > 0);
    CHECK(cuda::is_built());
    CHECK(cuda::is_available());
    const int cur = cuda::current_device();
    {
      cuda::DeviceGuard g(n - 1);
      CHECK(cuda::current_device() == n - 1);
      {
        cuda::DeviceGuard inner(Device(DeviceType::cuda, 0));
        CHECK(cuda::current_device() == 0);
      }
      CHECK(cuda::current_device() == n - 1);
    }
    CHECK(cuda::current_device() == cur);
    cuda::DeviceProperties p = cuda::get_device_properties(0);
    CHECK_FALSE(p.name.empty());
    CHECK(p.major >= 7);  // CI GPUs are sm_80 / sm_90
    CHECK(p.minor >= 0);
    CHECK(p.multi_processor_count > 0);
    CHECK(p.total_memory > (int64_t(1) << 30));
    CHECK(p.l2_cache_size > 0);
    CHECK(p.max_threads_per_block >= 1024);
    CHECK(p.driver_version > 0);
    CHECK(p.runtime_version >= 11000);
    CHECK(cuda::current_stream() != nullptr);
    try {
      cuda::set_device(99);
      FAIL("set_device(99) did not throw");
    } catch (const Error& e) {
      const std::string msg = e.what();
      CHECK_MESSAGE(msg.find("99") != std::string::npos, msg);
      CHECK_MESSAGE(msg.find("set_device") != std::string::npos, msg);
    }
    CHECK(cuda::current_device() == cur);
    CHECK_THROWS_AS(cuda::DeviceGuard(-2), Error);
    CHECK_THROWS_AS(cuda::get_device_properties(n + 5), Error);
  }

  TEST_CASE("cuda runtime: TF32 flag round-trips") {
    bool prev = cuda::allow_tf32();
    cuda::set_allow_tf32(true);
    CHECK(cuda::allow_tf32());
    cuda::set_allow_tf32(false);
    CHECK_FALSE(cuda::allow_tf32());
    cuda::set_allow_tf32(prev);
  }

  TEST_CASE("cuda graph: MLP + dropout + AdamW replays equal eager steps") {
    check_graph_matches_eager(small_mlp, {16, 32}, 3, 12);
  }

  TEST_CASE("cuda graph: the MNIST Net (conv, pool, dropout) replays equal eager steps") {
    auto make = [] { return std::make_shared<mnist::Net>(); };
    // Atomic (non-deterministic) cuDNN algorithms would make eager and replay differ in the
    // last bits, which AdamW amplifies to ±lr where gradients are near zero.
    struct Deterministic {
      Deterministic() { cuda::set_cudnn_deterministic(true); }
      ~Deterministic() { cuda::set_cudnn_deterministic(false); }
    } deterministic;
    check_graph_matches_eager(make, {8, 1, 28, 28}, 2, 5);
  }

  TEST_CASE("cuda graph: replay without capture, double capture and reset are errors") {
    cuda::CUDAGraph g;
    CHECK_FALSE(g.captured());
    CHECK_THROWS_AS(g.replay(), Error);
    CHECK_THROWS_AS(g.capture_end(), Error);
    Tensor x = full({256}, 1.0, kFloat32, kCUDA);
    Tensor out;
    g.capture_begin();
    out = x * 3.0 + 1.0;
    g.capture_end();
    CHECK_THROWS_AS(g.capture_begin(), Error);  // already captured
    x.fill_(2.0);
    g.replay();
    CHECK(sum(out).item<double>() == 256 * 7.0);
    g.reset();
    CHECK_FALSE(g.captured());
    g.capture_begin();  // usable again after reset
    out = x - 1.0;
    g.capture_end();
    g.replay();
    CHECK(sum(out).item<double>() == 256.0);
  }

  TEST_CASE("cuda graph: item() inside a capture fails with a clear error") {
    Tensor x = full({16}, 1.0, kFloat32, kCUDA);
    cuda::CUDAGraph g;
    g.capture_begin();
    std::string msg;
    try {
      (void)(sum(x).item<double>());
    } catch (const Error& e) {
      msg = e.what();
    }
    try {
      g.capture_end();
    } catch (const Error& e) {
      if (msg.empty()) msg = e.what();
    }
    CHECK_FALSE(msg.empty());
    CHECK_MESSAGE(msg.find("captur") != std::string::npos, msg);
    CHECK_FALSE(cuda::is_capturing());
    // the device is usable afterwards
    CHECK(sum(x).item<double>() == 16.0);
  }
}
