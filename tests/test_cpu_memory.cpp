// CPU memory bounds: conv2d under a tiny workspace budget equals the default run, the
// allocator's cache of freed blocks stays under its cap (LRU eviction, stats), and one MNIST
// evaluation batch of 1000 images peaks at the activations it needs plus the workspace.
#include <doctest/doctest.h>

#include <array>

#include "apps/mnist/model.h"
#include "tensor/cpu/kernels.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {

constexpr int64_t kMiB = int64_t(1) << 20;

// Sets the conv workspace budget (and optionally the thread count) for one scope.
struct BudgetGuard {
  int64_t old_budget = cpu::conv_workspace_budget();
  int old_threads = get_num_threads();
  BudgetGuard(int64_t budget, int threads) {
    cpu::set_conv_workspace_budget(budget);
    set_num_threads(threads);
  }
  ~BudgetGuard() {
    cpu::set_conv_workspace_budget(old_budget);
    set_num_threads(old_threads);
  }
};

// A fixed cap for one case; the adaptive default afterwards.
struct CacheCapGuard {
  explicit CacheCapGuard(int64_t cap) {
    empty_cache();
    set_cpu_cache_cap(cap);
  }
  ~CacheCapGuard() { reset_cpu_cache_cap(); }
};

Conv2dParams params(int64_t s, int64_t pad, int64_t dil, int64_t groups) {
  Conv2dParams p;
  p.stride[0] = p.stride[1] = s;
  p.padding[0] = p.padding[1] = pad;
  p.dilation[0] = p.dilation[1] = dil;
  p.groups = groups;
  return p;
}

struct ConvResults {
  Tensor out, grad_x, grad_w;
};

ConvResults run_conv(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& g,
                     const Conv2dParams& p) {
  return {conv2d(x, w, b, p), conv2d_backward_input(g, w, x.shape(), p),
          conv2d_backward_weight(g, x, w.shape(), p)};
}

}  // namespace

TEST_CASE("conv2d: a one-image workspace budget gives the default budget's results") {
  // {N, C, H, W, O, k, stride, pad, dilation, groups}
  const std::vector<std::array<int64_t, 10>> cfgs = {
      {5, 3, 9, 9, 4, 3, 2, 0, 1, 1},    // strided
      {6, 4, 7, 8, 6, 3, 1, 2, 1, 1},    // padded
      {5, 2, 11, 10, 3, 3, 1, 1, 2, 1},  // dilated
      {4, 6, 8, 8, 9, 3, 1, 1, 1, 3},    // grouped
      {7, 8, 6, 6, 5, 1, 1, 0, 1, 1},    // 1x1: the column matrix is the input itself
      {0, 3, 5, 5, 4, 3, 1, 0, 1, 1},    // zero-size batch
  };
  uint64_t seed = 100;
  for (const auto& c : cfgs) {
    const Conv2dParams p = params(c[6], c[7], c[8], c[9]);
    const Shape xs{c[0], c[1], c[2], c[3]}, ws{c[4], c[1] / c[9], c[5], c[5]};
    for (DType dt : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
      INFO("x ", shape_str(xs), " w ", shape_str(ws), " dtype ", dtype_name(dt));
      Tensor x = random_tensor(xs, dt, seed++), w = random_tensor(ws, dt, seed++);
      Tensor b = random_tensor({ws[0]}, dt, seed++);
      Tensor out = conv2d(x, w, b, p);
      Tensor g = random_tensor(out.shape(), dt, seed++);
      for (int threads : {2, 1}) {
        ConvResults def, tiny;
        {
          BudgetGuard guard(cpu::kConvWorkspaceBudget, threads);
          def = run_conv(x, w, b, g, p);
          // the same call twice: backward-weight's partial sums are added in a fixed order
          CHECK(bitwise_equal(run_conv(x, w, b, g, p).grad_w, def.grad_w));
        }
        {
          BudgetGuard guard(1, threads);  // below one image: a single worker
          tiny = run_conv(x, w, b, g, p);
        }
        // forward and backward-input compute each image alone: bitwise equal at any budget
        CHECK(bitwise_equal(tiny.out, def.out));
        CHECK(bitwise_equal(tiny.grad_x, def.grad_x));
        // backward-weight sums over images per worker: bitwise equal with one thread, else
        // the workers' partial sums are split differently (rounding only)
        if (threads == 1)
          CHECK(bitwise_equal(tiny.grad_w, def.grad_w));
        else
          check_close(tiny.grad_w, def.grad_w);
      }
    }
  }
}

TEST_CASE("conv2d: the workspace budget setter rejects negative budgets") {
  CHECK_THROWS_AS(cpu::set_conv_workspace_budget(-1), Error);
  CHECK(cpu::conv_workspace_budget() == cpu::kConvWorkspaceBudget);
}

TEST_CASE("CPU allocator: the cache of freed blocks is capped, LRU, and reported") {
  // page multiples so that the cached sizes are exact
  const int64_t a = 3 * kMiB / 2, b = 2 * kMiB, c = 5 * kMiB / 2;
  CacheCapGuard guard(a + b + c - a / 2);  // room for b and c, not all three
  CHECK(memory_stats(kCPU).cached == 0);
  {
    Tensor ta = empty({a}, kUInt8), tb = empty({b}, kUInt8), tc = empty({c}, kUInt8);
    CHECK(memory_stats(kCPU).cached == 0);
    ta = Tensor();
    CHECK(memory_stats(kCPU).cached == a);
    tb = Tensor();
    CHECK(memory_stats(kCPU).cached == a + b);
    tc = Tensor();  // over the cap: the least recently freed block (a) goes back
    CHECK(memory_stats(kCPU).cached == b + c);
  }
  {
    Tensor tb = empty({b}, kUInt8);  // b is reused from the cache
    CHECK(memory_stats(kCPU).cached == c);
    Tensor ta = empty({a}, kUInt8);  // a was evicted: a fresh block, the cache keeps c
    CHECK(memory_stats(kCPU).cached == c);
  }  // ta, then tb freed: c + a + b is over the cap, c (least recently freed) goes back
  CHECK(memory_stats(kCPU).cached == a + b);
  // small blocks are never cached; a block larger than the cap is not either
  { Tensor small = empty({kMiB / 2}, kUInt8); }
  CHECK(memory_stats(kCPU).cached == a + b);
  set_cpu_cache_cap(64 * kMiB);
  {
    // a miss of >= 32 MiB first gives back cached blocks worth its size (here all of them)
    Tensor big = empty({33 * kMiB}, kUInt8);
    CHECK(memory_stats(kCPU).cached == 0);
  }
  CHECK(memory_stats(kCPU).cached == 33 * kMiB);
  // above the cap: straight back; its miss leaves the large cached block to the cap
  { Tensor huge = empty({65 * kMiB}, kUInt8); }
  CHECK(memory_stats(kCPU).cached == 33 * kMiB);
  empty_cache();
  // lowering the cap trims at once (least recently freed first); empty_cache releases all
  { Tensor t1 = empty({b}, kUInt8), t2 = empty({c}, kUInt8); }  // t2 freed first
  CHECK(memory_stats(kCPU).cached == b + c);
  set_cpu_cache_cap(c);
  CHECK(memory_stats(kCPU).cached == b);
  empty_cache();
  CHECK(memory_stats(kCPU).cached == 0);
  set_cpu_cache_cap(0);  // caching off
  { Tensor t = empty({b}, kUInt8); }
  CHECK(memory_stats(kCPU).cached == 0);
  CHECK_THROWS_AS(set_cpu_cache_cap(-1), Error);
}

TEST_CASE("CPU allocator: the default cap is 512 MiB at most and the cache never exceeds it") {
  reset_cpu_cache_cap();
  CHECK(cpu_cache_cap() > 0);
  CHECK(cpu_cache_cap() <= kDefaultCpuCacheCap);
  {
    std::vector<Tensor> blocks;
    for (int i = 0; i < 12; ++i) blocks.push_back(empty({(40 + i) * kMiB}, kUInt8));
  }  // 546 MiB freed at once, different sizes
  CHECK(memory_stats(kCPU).cached <= cpu_cache_cap());
  empty_cache();
}

// One "training step" of 12 large blocks (40..51 MiB, 546 MiB), all alive at its peak, freed,
// then allocated again; returns the bytes cached after the step's blocks are freed.
int64_t cache_step() {
  {
    std::vector<Tensor> blocks;
    for (int i = 0; i < 12; ++i) blocks.push_back(empty({(40 + i) * kMiB}, kUInt8));
  }
  return memory_stats(kCPU).cached;
}

TEST_CASE(
    "CPU allocator: the default cap grows while a step's blocks outnumber it, a set cap "
    "does not") {
  const int64_t step_bytes = 546 * kMiB;
  reset_cpu_cache_cap();
  empty_cache();
  const int64_t cap0 = cpu_cache_cap();
  REQUIRE(cap0 < step_bytes);  // 512 MiB, or less on a small machine
  // step 1: the cap evicts the first blocks freed; step 2 misses exactly those sizes and the cap
  // grows by each (bounded by the 546 MiB held at once); from then on every block is reused
  CHECK(cache_step() <= cap0);
  CHECK(cache_step() == step_bytes);
  CHECK(cpu_cache_cap() >= step_bytes);
  CHECK(cpu_cache_cap() <= std::max(cap0, step_bytes + 51 * kMiB));
  const int64_t grown = cpu_cache_cap();
  {
    std::vector<Tensor> blocks;
    for (int i = 0; i < 12; ++i) blocks.push_back(empty({(40 + i) * kMiB}, kUInt8));
    CHECK(memory_stats(kCPU).cached == 0);  // all 12 from the cache
  }
  CHECK(cache_step() == step_bytes);
  CHECK(cpu_cache_cap() == grown);  // no misses, no growth
  // a cap set by the user stays where it is
  set_cpu_cache_cap(cap0);
  CHECK(memory_stats(kCPU).cached <= cap0);
  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    CHECK(cache_step() <= cap0);
    CHECK(cpu_cache_cap() == cap0);
  }
  reset_cpu_cache_cap();
  CHECK(cpu_cache_cap() == cap0);
  empty_cache();
}

TEST_CASE("CPU allocator: a large miss releases small blocks only, so large sizes recur") {
  // an evaluation batch after training: blocks of 40, 50 and 36 MiB, the 40 MiB one freed
  // before the 36 MiB one is allocated; the second batch must find all three in the cache
  CacheCapGuard guard(kDefaultCpuCacheCap);
  const int64_t A = 40 * kMiB, B = 50 * kMiB, C = 36 * kMiB;
  { Tensor small = empty({2 * kMiB}, kUInt8); }  // a training step's block
  CHECK(memory_stats(kCPU).cached == 2 * kMiB);
  for (int round = 0; round < 2; ++round) {
    CAPTURE(round);
    Tensor a = empty({A}, kUInt8);  // round 0: a miss that releases the small block
    CHECK(memory_stats(kCPU).cached == (round == 0 ? 0 : B + C));
    Tensor b = empty({B}, kUInt8);
    a = Tensor();
    Tensor c = empty({C}, kUInt8);  // round 0: a miss that leaves the cached a alone
    CHECK(memory_stats(kCPU).cached == A);
  }
  CHECK(memory_stats(kCPU).cached == A + B + C);
}

TEST_CASE("MNIST Net: one evaluation batch of 1000 images peaks at its activations + workspace") {
  BudgetGuard threads(cpu::kConvWorkspaceBudget, 2);
  manual_seed(1);
  mnist::Net net;
  net.eval();
  Tensor x = random_tensor({1000, 1, 28, 28}, kFloat32, 7, 0, 1);
  NoGradGuard no_grad;
  reset_peak_memory_stats(kCPU);
  const int64_t base = memory_stats(kCPU).allocated;
  Tensor out = net.forward(x);
  const int64_t peak = memory_stats(kCPU).peak - base;
  // Largest set of tensors that must coexist, in f32 bytes: at conv2(h), its input h =
  // relu(conv1(x)) [1000,32,26,26] (86.5 MB; relu overwrites the unshared conv1 output) and
  // its output [1000,64,24,24] (147.5 MB; relu again in place) -> 234 MB; later the pooled
  // [1000,64,12,12] (36.9 MB, no int64 indices without autograd) beside conv2's output is
  // less. Plus the conv workspace budget (32 MiB; conv2's per-worker column matrix is
  // 288 x 576 floats = 0.66 MB) and 4 MiB for small tensors.
  const int64_t conv1_out = 1000LL * 32 * 26 * 26 * 4, conv2_out = 1000LL * 64 * 24 * 24 * 4;
  const int64_t bound = conv1_out + conv2_out + cpu::kConvWorkspaceBudget + 4 * kMiB;
  INFO("peak ", peak, " bytes, bound ", bound);
  CHECK(peak <= bound);
  CHECK(out.shape() == Shape{1000, 10});
  // the in-place relu and the index-free pooling give the values of the recording path
  NoGradGuard still_no_grad;
  Tensor h = conv2d(x.narrow(0, 0, 8), net.conv1->weight, net.conv1->bias);
  Tensor r = relu(h);
  CHECK(to_f64(relu(h.clone())) == to_f64(r));
  Pool2dParams pp = pool2d_params(2);
  CHECK(to_f64(max_pool2d(r, pp)) == to_f64(max_pool2d_with_indices(r, pp).first));
}
