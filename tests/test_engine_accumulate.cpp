// The backward engine's gradient sums (autograd/engine.cpp accumulate): a node input reached by
// several branches is summed in place in a buffer only the engine holds (no new tensor per
// branch, like torch's InputBuffer), with the values of the out-of-place sum; gradients that a
// caller passed in are never written.
#include <doctest/doctest.h>

#include "autograd/function.h"
#include "minidl.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {

// out = x (a copy) whose backward returns a fresh copy of the gradient, noting its address.
Tensor tagged(const Tensor& x, std::vector<const void*>* addresses) {
  Tensor out = native::clone(x);
  autograd::record("TaggedBackward", {x}, {&out}, {}, [addresses](const auto& g, const auto&) {
    Tensor r = native::clone(g[0]);
    addresses->push_back(r.data_ptr());
    return std::vector<Tensor>{r};
  });
  return out;
}

}  // namespace

TEST_CASE("engine: branches into one input are summed in place, with the out-of-place values") {
  Tensor w = random_tensor({1000}, kFloat32, 1).requires_grad_();
  std::vector<const void*> addresses;
  const void* total = nullptr;
  w.register_hook([&](const Tensor& g) {
    total = g.data_ptr();
    return Tensor();
  });
  std::vector<Tensor> r;
  Tensor loss;
  for (int k = 0; k < 3; ++k) {
    r.push_back(random_tensor({1000}, kFloat32, 10 + k));
    const Tensor term = sum(tagged(w, &addresses) * r.back());
    loss = loss.defined() ? loss + term : term;
  }
  loss.backward();
  REQUIRE(addresses.size() == 3);
  CHECK(total == addresses[0]);  // the first branch's tensor holds the sum
  // the same values as adding the three gradients out of place, in the order they arrived
  // (the last branch made is the first to run)
  CHECK(bitwise_equal(w.grad(), (r[2] + r[1]) + r[0]));
}

TEST_CASE("engine: gradients passed in by the caller are not written") {
  Tensor w = random_tensor({64}, kFloat32, 2).requires_grad_();
  const Tensor z = w * 2.0;
  const Tensor g1 = random_tensor({64}, kFloat32, 3), g2 = random_tensor({64}, kFloat32, 4);
  const Tensor g1_before = g1.clone();
  autograd::run_backward({z, z}, {g1, g2}, false);  // both start in z's node's buffer
  CHECK(bitwise_equal(g1, g1_before));
  CHECK(bitwise_equal(w.grad(), (g1 + g2) * 2.0));
}
