// Autocast's batched weight copies (autograd/autocast.cpp): an outermost region casts the
// weights the previous region used in one foreach_copy_ on entry. Same values, same history and
// same cast counters as casting each at its first use; refreshed after an optimizer step;
// MINIDL_UNFUSED=autocast_weight_copies turns it off. foreach_copy_ itself: values and errors.
#include <doctest/doctest.h>

#include "tensor/profiler.h"
#include "tensor/variants.h"
#include "test_util.h"
#include "two_layer_mlp.h"

using namespace minidl;
using namespace testutil;

namespace {

struct Step {
  Tensor out;
  std::vector<Tensor> grads;
  int64_t forward_dispatches = 0;
  amp::AutocastCacheStats stats;
};

// One bf16 autocast region: forward (counted), then backward outside it.
Step step(const std::vector<Tensor>& p, const Tensor& x) {
  Step s;
  for (Tensor t : p) t.set_grad(Tensor());
  amp::reset_autocast_cache_stats();
  s.forward_dispatches = dispatches_of([&] {
    amp::autocast ac(DeviceType::cpu);
    s.out = mlp(p, x);
    s.stats = amp::autocast_cache_stats();
  });
  sum(s.out.to(kFloat32)).backward();
  for (const Tensor& t : p) s.grads.push_back(t.grad().defined() ? t.grad().clone() : Tensor());
  return s;
}

}  // namespace

TEST_CASE("autocast weight copies: the second region casts the used weights in one dispatch") {
  amp::clear_autocast_cache();
  const Tensor x = random_tensor({5, 8}, kFloat32, 40);
  std::vector<Tensor> p = mlp_params(41);
  const Step first = step(p, x);
  const Step second = step(p, x);
  // 4 weight casts in both (the first use of a batched copy counts as its cast), 1 dispatch
  // instead of 4 for them in the second
  CHECK(first.stats.weight_casts == 4);
  CHECK(second.stats.weight_casts == 4);
  CHECK(second.stats.hits == first.stats.hits);
  CHECK(second.forward_dispatches == first.forward_dispatches - 3);
  // the same values and gradients
  CHECK(bitwise_equal(first.out, second.out));
  for (size_t i = 0; i < p.size(); ++i) CHECK(bitwise_equal(first.grads[i], second.grads[i]));

  // after an in-place update (an optimizer step) the batched copies carry the new values
  {
    NoGradGuard no_grad;
    for (Tensor& t : p) t.sub_(full(t.shape(), 0.25, kFloat32));
  }
  const Step third = step(p, x);
  amp::clear_autocast_cache();
  const Step fresh = step(p, x);  // per-weight casts again (nothing remembered)
  CHECK(fresh.forward_dispatches == first.forward_dispatches);
  CHECK(third.forward_dispatches == second.forward_dispatches);
  CHECK(bitwise_equal(third.out, fresh.out));
  for (size_t i = 0; i < p.size(); ++i) CHECK(bitwise_equal(third.grads[i], fresh.grads[i]));
  CHECK_FALSE(bitwise_equal(third.out, first.out));
  amp::clear_autocast_cache();
}

TEST_CASE("autocast weight copies: off under MINIDL_UNFUSED, and only for weights still used") {
  amp::clear_autocast_cache();
  const Tensor x = random_tensor({3, 8}, kFloat32, 50);
  std::vector<Tensor> p = mlp_params(51);
  {
    ScopedUnfused u("autocast_weight_copies");
    const Step a = step(p, x), b = step(p, x);
    CHECK(b.forward_dispatches == a.forward_dispatches);
  }
  amp::clear_autocast_cache();
  const Step a = step(p, x);
  // a region that uses only the first layer: the batched copies of w2 and b2 go unused and
  // are not made again in the next region
  auto first_layer = [&] {
    amp::autocast ac(DeviceType::cpu);
    return linear(x, p[0], p[1]);
  };
  (void)first_layer();
  amp::reset_autocast_cache_stats();
  int64_t n = dispatches_of([&] { (void)first_layer(); });
  // the 2 weight casts in one batched dispatch, the cast of x and the linear
  CHECK(n == 3);
  CHECK(amp::autocast_cache_stats().weight_casts == 2);
  // a frozen parameter is not batched (torch caches only leaves that require grad)
  p[2] = p[2].detach();
  amp::clear_autocast_cache();
  (void)step(p, x);
  const Step c = step(p, x);
  CHECK(c.stats.weight_casts == 3);
  (void)a;
  amp::clear_autocast_cache();
}

TEST_CASE("foreach_copy_: each pair copied with a cast, checks name the pair") {
  const std::vector<Tensor> src = {random_tensor({3, 5}, kFloat32, 1),
                                   random_tensor({7}, kFloat32, 2), random_tensor({0}, kFloat32, 3),
                                   random_tensor({70001}, kFloat32, 4)};
  std::vector<Tensor> dst;
  for (const Tensor& s : src) dst.push_back(empty(s.shape(), kBFloat16));
  CHECK(dispatches_of([&] { native::foreach_copy_(dst, src); }) == 1);
  for (size_t i = 0; i < src.size(); ++i) CHECK(bitwise_equal(dst[i], src[i].to(kBFloat16)));
  std::vector<Tensor> wrong = {empty({3, 5}, kBFloat16), empty({8}, kBFloat16)};
  CHECK_THROWS_WITH_AS(native::foreach_copy_(wrong, {src[0], src[1]}),
                       doctest::Contains("pair 1 must be contiguous floating tensors of one shape"),
                       Error);
  CHECK_THROWS_WITH_AS(native::foreach_copy_({dst[0]}, src),
                       doctest::Contains("1 destinations for 4 sources"), Error);
}
