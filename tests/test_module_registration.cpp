// Registration that cannot silently go wrong: register_module without `&` does not compile,
// slots outside the object are refused, nn::check_registration names tensors a forward used but
// the module does not register, DDP and DataParallel fail on their first forward with such a
// model, and clone() refuses a member that still points into the original.
#include <doctest/doctest.h>

#include <string>

#include "ddp_test_util.h"
#include "nn/layers.h"
#include "nn/registration_check.h"
#include "parallel/data_parallel/data_parallel.h"
#include "test_util.h"

using namespace minidl;

namespace {

// register_module(name, x) compiles for x = &member only; add_module takes the shared_ptr.
template <class Arg>
concept CanRegisterModule = requires(nn::Module& m, Arg a) {
  m.register_module("fc", a);
};
template <class Arg>
concept CanAddModule = requires(nn::Module& m, Arg a) {
  m.add_module("fc", a);
};

static_assert(CanRegisterModule<std::shared_ptr<nn::Linear>*>);
static_assert(CanRegisterModule<std::shared_ptr<nn::Module>*>);
static_assert(!CanRegisterModule<std::shared_ptr<nn::Linear>>,
              "the `&`-less call must not compile");
static_assert(!CanRegisterModule<std::shared_ptr<nn::Module>>);
static_assert(!CanRegisterModule<const std::shared_ptr<nn::Linear>&>);
static_assert(CanAddModule<std::shared_ptr<nn::Linear>>);
static_assert(CanAddModule<std::shared_ptr<nn::Module>>);

// x:[B,4] -> fc1 (4->5) -> relu -> fc2 (5->3) -> * scale:[3]. fc2 and scale are registered only
// when asked: the PyTorch user's forgotten register_module / register_parameter.
struct Net : nn::Cloneable<Net> {
  std::shared_ptr<nn::Linear> fc1, fc2;
  Tensor scale;
  Net(bool register_fc2, bool register_scale) {
    fc1 = std::make_shared<nn::Linear>(4, 5);
    fc2 = std::make_shared<nn::Linear>(5, 3);
    scale = ones({3}).requires_grad_();
    register_module("fc1", &fc1);
    if (register_fc2) register_module("fc2", &fc2);
    if (register_scale) register_parameter("scale", &scale);
  }
  Tensor forward(const Tensor& x) override {
    return mul(fc2->forward(relu(fc1->forward(x))), scale);
  }
};

std::string shapes(const std::vector<nn::UnregisteredTensor>& found) {
  std::string s;
  for (const auto& u : found) s += u.tensor.shape_str() + ";";
  return s;
}

}  // namespace

TEST_CASE("registration: check_registration names what the forward used but nobody registered") {
  manual_seed(0);
  Tensor x = randn({2, 4});
  SUBCASE("a correct model: nothing") {
    Net net(true, true);
    CHECK(nn::check_registration(net, net.forward(x), {x}).empty());
    CHECK_NOTHROW(nn::assert_registered(net, net.forward(x), {x}));
  }
  SUBCASE("an unregistered Linear member: its weight and bias, in forward order") {
    Net net(false, true);
    auto found = nn::check_registration(net, net.forward(x), {x});
    REQUIRE(found.size() == 2);
    CHECK(shapes(found) == "[3, 5];[3];");
    CHECK(found[0].tensor.is_same(net.fc2->weight));
    CHECK(found[1].tensor.is_same(net.fc2->bias));
    CHECK(found[0].str().find("[3, 5] float32") != std::string::npos);
    CHECK(found[0].after == "fc1.bias");  // fc1's last parameter used before it
    CHECK(found[0].before == "scale");
    CHECK_THROWS_WITH_AS(nn::assert_registered(net, net.forward(x), {x}, "ctx"),
                         doctest::Contains("ctx: the forward of Net used 2 tensor(s)"), Error);
    CHECK_THROWS_WITH_AS(nn::assert_registered(net, net.forward(x), {x}),
                         doctest::Contains("register_module(\"name\", &member)"), Error);
  }
  SUBCASE("an unregistered parameter is named") {
    Net net(true, false);
    auto found = nn::check_registration(net, net.forward(x));
    REQUIRE(found.size() == 1);
    CHECK(found[0].tensor.is_same(net.scale));
    CHECK(found[0].used_by.find("Mul") != std::string::npos);
    CHECK(found[0].after == "fc2.bias");
    CHECK(found[0].before.empty());
    CHECK(found[0].str() == "[3] float32 (used by " + found[0].used_by + " after 'fc2.bias')");
    CHECK_THROWS_WITH_AS(nn::assert_registered(net, net.forward(x)),
                         doctest::Contains("register_parameter(\"name\", &member)"), Error);
  }
  SUBCASE("the forward's inputs are not the module's: a leaf input and an input's history") {
    Net net(true, true);
    Tensor leaf = randn({2, 4}).requires_grad_();
    CHECK(nn::check_registration(net, net.forward(leaf), {leaf}).empty());
    CHECK(shapes(nn::check_registration(net, net.forward(leaf))) == "[2, 4];");  // not excluded
    Tensor w = randn({4}).requires_grad_();  // the caller's, used before the forward
    Tensor h = mul(x, w);
    CHECK(nn::check_registration(net, net.forward(h), {h}).empty());
    CHECK(shapes(nn::check_registration(net, net.forward(h))) == "[4];");
  }
  SUBCASE("no graph, nothing to check") {
    Net net(false, false);
    NoGradGuard no_grad;
    CHECK(nn::check_registration(net, net.forward(x), {x}).empty());
  }
}

TEST_CASE("registration: DDP's first forward refuses a model with an unregistered layer") {
  ddptest::run_ranks(1, [](int rank, std::shared_ptr<dist::ProcessGroup> pg) {
    manual_seed(1);
    Tensor x = randn({2, 4});
    bool ok = true;
    {
      auto bad = std::make_shared<Net>(false, true);
      dist::DistributedDataParallel ddp(bad, pg);
      try {
        ddp.forward(x);
        ok = ddptest::report(rank, false, "no error for an unregistered Linear");
      } catch (const Error& e) {
        const std::string msg = e.what();
        ok = ddptest::report(rank,
                             disttest::contains(msg, "DistributedDataParallel (first forward)") &&
                                 disttest::contains(msg, "[3, 5] float32") &&
                                 disttest::contains(msg, "[3] float32") &&
                                 disttest::contains(msg, "register_module"),
                             "message: " + msg);
      }
    }
    {  // the same model registered trains; the check runs on the first forward only
      auto good = std::make_shared<Net>(true, true);
      dist::DistributedDataParallel ddp(good, pg);
      Tensor loss = sum(ddp.forward(x));
      loss.backward();
      ok = ddptest::report(rank, good->fc2->weight.grad().defined(), "fc2 got no gradient") && ok;
      ok = ddptest::report(rank, ddp.forward(x).shape() == Shape{2, 3}, "second forward") && ok;
    }
    {  // the opt-out
      dist::DDPOptions o;
      o.check_registration = false;
      dist::DistributedDataParallel ddp(std::make_shared<Net>(true, false), pg, o);
      ok = ddptest::report(rank, ddp.forward(x).shape() == Shape{2, 3}, "opt-out") && ok;
    }
    return ok;
  });
}

TEST_CASE("registration: DataParallel's first forward refuses a model with an unregistered layer") {
  manual_seed(2);
  Tensor x = randn({4, 4});
  auto bad = std::make_shared<Net>(false, true);
  dist::DataParallel dp(bad, {kCPU, kCPU});
  {
    NoGradGuard no_grad;  // no graph: not checked yet
    CHECK(dp.forward(x).shape() == Shape{4, 3});
  }
  CHECK_THROWS_WITH_AS(dp.forward(x),
                       doctest::Contains("DataParallel (first forward, replica 0 on cpu)"), Error);
  CHECK_THROWS_WITH_AS(
      dist::DataParallel(std::make_shared<Net>(false, true), {kCPU, kCPU}).forward(x),
      doctest::Contains("[3, 5] float32"), Error);
  auto good = std::make_shared<Net>(true, true);
  dist::DataParallel ok(good, {kCPU, kCPU});
  sum(ok.forward(x)).backward();
  CHECK(good->fc2->weight.grad().defined());
  CHECK(good->scale.grad().defined());
}

namespace {
// A member that aliases a registered child without being a slot: the clone would keep the
// original's layer.
struct Aliased : nn::Cloneable<Aliased> {
  std::shared_ptr<nn::Linear> fc, alias;
  Tensor weight_alias;
  explicit Aliased(int which) {
    fc = std::make_shared<nn::Linear>(2, 2);
    register_module("fc", &fc);
    if (which == 1) alias = fc;
    if (which == 2) weight_alias = fc->weight;
  }
  Tensor forward(const Tensor& x) override { return alias ? alias->forward(x) : fc->forward(x); }
};

// Slots outside the object: a local variable and a std::vector element.
struct VectorSlots : nn::Cloneable<VectorSlots> {
  std::vector<Tensor> ws{Tensor(), Tensor()};
  Tensor w;
  explicit VectorSlots(int which) {
    if (which == 0) register_parameter("w", &w);
    if (which == 1) register_parameter("w0", &ws[0]);
    if (which == 2) {
      Tensor local = ones({1});
      register_buffer("local", &local);
    }
  }
};
}  // namespace

TEST_CASE("registration: slots must lie inside the module object, in every build type") {
  CHECK_NOTHROW(VectorSlots(0));
  CHECK_THROWS_WITH_AS(VectorSlots(1), doctest::Contains("std::vector"), Error);
  CHECK_THROWS_WITH_AS(VectorSlots(1), doctest::Contains("data member"), Error);
  CHECK_THROWS_WITH_AS(VectorSlots(2), doctest::Contains("VectorSlots"), Error);
}

TEST_CASE("registration: clone refuses a member that still points at the original") {
  auto plain = std::make_shared<Aliased>(0);
  CHECK_NOTHROW(plain->clone());
  auto child = std::make_shared<Aliased>(1);
  CHECK_THROWS_WITH_AS(child->clone(), doctest::Contains("the original's submodule 'fc' (Linear)"),
                       Error);
  auto tensor = std::make_shared<Aliased>(2);
  CHECK_THROWS_WITH_AS(tensor->clone(),
                       doctest::Contains("the original's parameter 'fc.weight' [2, 2] float32"),
                       Error);
  // Tied registrations (one child in two slots) are fine: the clone shares one copy.
  struct Tied : nn::Cloneable<Tied> {
    std::shared_ptr<nn::Linear> a, b;
    Tied() {
      a = b = std::make_shared<nn::Linear>(2, 2);
      register_module("a", &a);
      register_module("b", &b);
    }
  };
  auto tied = std::make_shared<Tied>();
  auto c = std::dynamic_pointer_cast<Tied>(tied->clone());
  REQUIRE(c != nullptr);
  CHECK(c->a.get() == c->b.get());
  CHECK(c->a.get() != tied->a.get());
}
