// The registration check on the first optimizer.step(): a single-process model with a layer
// held but not registered warns once, with check_registration's message; registered models,
// subsets of parameters, a second optimizer's parameters and inputs that require grad do not.
#include <doctest/doctest.h>

#include "minidl.h"
#include "test_util.h"

using namespace minidl;

namespace {
// fc2 is held but never registered: its weights get gradients that no optimizer applies.
struct Forgetful : nn::Cloneable<Forgetful> {
  std::shared_ptr<nn::Linear> fc1 = std::make_shared<nn::Linear>(4, 8);
  std::shared_ptr<nn::Linear> fc2 = std::make_shared<nn::Linear>(8, 8);
  std::shared_ptr<nn::Linear> fc3 = std::make_shared<nn::Linear>(8, 2);
  Forgetful() {
    register_module("fc1", &fc1);
    register_module("fc3", &fc3);
  }
  Tensor forward(const Tensor& x) override { return (*fc3)(relu((*fc2)(relu((*fc1)(x))))); }
};

struct Careful : nn::Cloneable<Careful> {
  std::shared_ptr<nn::Linear> fc1 = std::make_shared<nn::Linear>(4, 8);
  std::shared_ptr<nn::Linear> fc2 = std::make_shared<nn::Linear>(8, 2);
  Careful() {
    register_module("fc1", &fc1);
    register_module("fc2", &fc2);
  }
  Tensor forward(const Tensor& x) override { return (*fc2)(relu((*fc1)(x))); }
};

template <class Net>
void train_steps(Net& model, optim::Optimizer& opt, int steps, const Tensor& x) {
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    sum(square(model(x))).backward();
    opt.step();
  }
}
}  // namespace

TEST_CASE("first optimizer.step() warns about an unregistered layer, once") {
  auto model = std::make_shared<Forgetful>();
  optim::SGD opt(model->parameters(), 0.1);
  WarningCapture w;
  train_steps(*model, opt, 3, testutil::random_tensor({5, 4}, kFloat32, 1));
  REQUIRE(w.messages().size() == 1);
  const std::string m = w.messages()[0];
  CAPTURE(m);
  CHECK(m.find("the forward of Forgetful used 2 tensor(s) that require grad but are not "
               "registered") != std::string::npos);
  CHECK(m.find("[8, 8] float32 (used by") != std::string::npos);
  CHECK(m.find("after 'fc1.bias', before 'fc3.weight'") != std::string::npos);
  CHECK(m.find("register_module(\"name\", &member)") != std::string::npos);
}

TEST_CASE("first-step check: silent for registered models, subsets, two optimizers, inputs") {
  WarningCapture w;
  Tensor x = testutil::random_tensor({5, 4}, kFloat32, 2);
  {
    auto model = std::make_shared<Careful>();
    optim::Adam opt(model->parameters(), 1e-3);
    train_steps(*model, opt, 2, x);
  }
  {  // fine-tuning only the head: fc1 gets gradients but is registered
    auto model = std::make_shared<Careful>();
    optim::SGD opt(model->fc2->parameters(), 0.1);
    train_steps(*model, opt, 1, x);
  }
  {  // two models, two optimizers (a GAN's generator and discriminator)
    auto g = std::make_shared<Careful>();
    auto d = std::make_shared<nn::Linear>(2, 1);
    optim::SGD opt_g(g->parameters(), 0.1), opt_d(d->parameters(), 0.1);
    opt_g.zero_grad();
    sum((*d)((*g)(x))).backward();  // reaches d's weights too
    opt_g.step();
  }
  {  // an input that requires grad (saliency maps, adversarial examples)
    auto model = std::make_shared<Careful>();
    optim::SGD opt(model->parameters(), 0.1);
    Tensor xi = x.clone().requires_grad_();
    sum((*model)(xi)).backward();
    opt.step();
  }
  CHECK(w.messages().empty());
}

TEST_CASE("first-step check without the model held by a shared_ptr: nothing to name, no warning") {
  Forgetful model;  // on the stack: the check cannot name its parameters, so it stays silent
  optim::SGD opt(model.parameters(), 0.1);
  WarningCapture w;
  train_steps(model, opt, 1, testutil::random_tensor({5, 4}, kFloat32, 3));
  CHECK(w.messages().empty());
  // nn::check_registration still finds it on demand.
  CHECK(nn::check_registration(model, model(ones({1, 4}))).size() == 2);
}
