// Calling a model with the wrong number of tensors says what the guide promises, on every path
// a user takes: module(x), module.call({x}), forward_inputs, and DataParallel.
#include <doctest/doctest.h>

#include "nn/module.h"
#include "parallel/data_parallel/data_parallel.h"
#include "test_util.h"

using namespace minidl;
using testutil::bitwise_equal;

namespace {
struct TwoIn : nn::Cloneable<TwoIn> {
  Tensor forward(const Tensor& a, const Tensor& b) { return a + b; }
};
struct NoForward : nn::Module {};
struct Outer : nn::Cloneable<Outer> {  // a one-input model around a two-input one
  std::shared_ptr<TwoIn> inner = std::make_shared<TwoIn>();
  Outer() { register_module("inner", &inner); }
  Tensor forward(const Tensor& x) override { return (*inner)(x); }
};
const char* kTwoIn = "TwoIn: forward called with 1 tensor(s), but its forward takes 2";
}  // namespace

TEST_CASE("a two-input model called with one tensor names both arities") {
  auto m = std::make_shared<TwoIn>();
  Tensor x = ones({2});
  CHECK_THROWS_WITH_AS((*m)(x), doctest::Contains(kTwoIn), Error);
  CHECK_THROWS_WITH_AS(m->call({x}), doctest::Contains(kTwoIn), Error);
  CHECK_THROWS_WITH_AS(m->forward_inputs({x}), doctest::Contains(kTwoIn), Error);
  m->register_forward_hook([](nn::Module&, const std::vector<Tensor>&, const Tensor&) {
    return std::optional<Tensor>();
  });
  CHECK_THROWS_WITH_AS((*m)(x), doctest::Contains(kTwoIn), Error);  // through the hooks
  CHECK(bitwise_equal((*m)(x, x), full({2}, 2.0)));
  CHECK_THROWS_WITH_AS(
      m->call({x, x, x}),
      doctest::Contains("forward called with 3 tensor(s), but its forward takes 2"), Error);
}

TEST_CASE("the arity error from inside another module and from DataParallel") {
  Outer outer;
  CHECK_THROWS_WITH_AS(outer(ones({2})), doctest::Contains(kTwoIn), Error);
  dist::DataParallel dp(std::make_shared<TwoIn>(), {kCPU, kCPU});
  CHECK_THROWS_WITH_AS(dp(ones({4, 2})), doctest::Contains(kTwoIn), Error);
}

TEST_CASE("a module with no forward says so (and does not recurse)") {
  NoForward m;
  CHECK_THROWS_WITH_AS(m(ones({2})), doctest::Contains("forward(const Tensor&) is not implemented"),
                       Error);
  CHECK_THROWS_WITH_AS(m.call({ones({2})}),
                       doctest::Contains("forward(const Tensor&) is not implemented"), Error);
}
