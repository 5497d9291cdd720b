// nn::Module machinery: registration by member pointer, traversal/naming, clone, train/eval,
// state_dict round trips and errors, dtype moves, zero_grad and PyTorch-format repr.
#include <doctest/doctest.h>

#include <sstream>

#include "autograd/grad_mode.h"
#include "nn/layers.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {
// A custom module with a parameter, a buffer and a child held as members.
struct Net : nn::Cloneable<Net> {
  Tensor w_, running_;
  std::shared_ptr<nn::Linear> fc_;
  Net() {
    w_ = ones({3});
    register_parameter("w", &w_);
    running_ = zeros({3});
    register_buffer("running", &running_);
    fc_ = std::make_shared<nn::Linear>(2, 3);
    register_module("fc", &fc_);
  }
  Tensor forward(const Tensor& x) override { return mul((*fc_)(x), w_); }
};

std::vector<std::string> names(const std::vector<std::pair<std::string, Tensor>>& v) {
  std::vector<std::string> out;
  for (auto& [n, t] : v) out.push_back(n);
  return out;
}

std::shared_ptr<nn::Sequential> small_net() {
  return std::make_shared<nn::Sequential>(nn::Sequential{
      std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Sequential>(nn::Sequential{std::make_shared<nn::Linear>(3, 2),
                                                      std::make_shared<nn::Dropout>(0.25)})});
}
}  // namespace

TEST_CASE("module: registration, reassignment and requires_grad") {
  auto net = std::make_shared<Net>();
  CHECK(names(net->named_parameters()) == std::vector<std::string>{"w", "fc.weight", "fc.bias"});
  CHECK(names(net->named_parameters(false)) == std::vector<std::string>{"w"});
  CHECK(names(net->named_buffers()) == std::vector<std::string>{"running"});
  CHECK(net->w_.requires_grad());
  CHECK_FALSE(net->running_.requires_grad());
  CHECK(net->num_parameters() == 3 + 6 + 3);
  // Reassigning the member is visible through parameters().
  Tensor nw = full({3}, 2.0);
  net->w_ = nw;
  CHECK(net->parameters()[0].is_same(nw));
  auto old_fc = net->fc_;
  net->fc_ = std::make_shared<nn::Linear>(2, 3, false);
  CHECK(names(net->named_parameters()) == std::vector<std::string>{"w", "fc.weight"});
  CHECK(net->children()[0].get() == net->fc_.get());
  net->fc_->weight = zeros({3, 2});
  CHECK(net->parameters()[1].is_same(net->fc_->weight));
  // Errors: duplicate names, dotted names, non-member slots, integer parameters.
  CHECK_THROWS_WITH_AS(net->register_parameter("w", &net->w_), doctest::Contains("'w'"), Error);
  CHECK_THROWS_WITH_AS(net->register_buffer("a.b", &net->running_), doctest::Contains("a.b"),
                       Error);
  Tensor outside = ones({1});
  CHECK_THROWS_WITH_AS(net->register_buffer("x", &outside), doctest::Contains("data member"),
                       Error);
  CHECK_THROWS_AS(nn::Module().forward(ones({1})), Error);
}

TEST_CASE("module: nested Sequential naming and traversal") {
  auto seq = small_net();
  CHECK(names(seq->named_parameters()) ==
        std::vector<std::string>{"0.weight", "0.bias", "2.0.weight", "2.0.bias"});
  std::vector<std::string> mods;
  for (auto& [n, m] : seq->named_modules()) mods.push_back(n + ":" + m->name());
  CHECK(mods == std::vector<std::string>{":Sequential", "0:Linear", "1:ReLU", "2:Sequential",
                                         "2.0:Linear", "2.1:Dropout"});
  CHECK(seq->modules().size() == 6);
  CHECK(seq->size() == 3);
  CHECK((*seq)[-1]->name() == "Sequential");
  CHECK_THROWS_WITH_AS((*seq)[3], doctest::Contains("index 3"), Error);
  seq->push_back(std::make_shared<nn::Tanh>());
  CHECK(seq->named_children().back().first == "3");
  CHECK(seq->forward(ones({5, 4})).shape() == Shape{5, 2});
  // A module under a shared feature wrapper gets the dotted path.
  struct Outer : nn::Cloneable<Outer> {
    std::shared_ptr<nn::Sequential> features;
    Outer() : features(small_net()) { register_module("features", &features); }
  };
  auto outer = std::make_shared<Outer>();
  CHECK(names(outer->named_parameters())[2] == "features.2.0.weight");
  // Shared parameters appear once.
  auto lin = std::make_shared<nn::Linear>(2, 2);
  nn::Sequential twice{lin, lin};
  CHECK(twice.parameters().size() == 2);
  nn::ModuleList list{lin, std::make_shared<nn::ReLU>()};
  list.push_back(std::make_shared<nn::GELU>());
  CHECK(list.size() == 3);
  CHECK(list[2]->name() == "GELU");
  int n = 0;
  for (auto& m : list.items()) n += m != nullptr;
  CHECK(n == 3);
  CHECK_THROWS_AS(list.forward(ones({2})), Error);
}

TEST_CASE("module: clone is deep and independent") {
  auto net = std::make_shared<Net>();
  auto c = std::dynamic_pointer_cast<Net>(net->clone());
  REQUIRE(c != nullptr);
  CHECK(c->fc_.get() != net->fc_.get());
  CHECK_FALSE(c->w_.shares_storage(net->w_));
  CHECK(c->fc_->weight.requires_grad());
  CHECK(c->parameters()[1].is_same(c->fc_->weight));
  {
    NoGradGuard g;
    c->fc_->weight.fill_(7.0);
    c->running_.fill_(3.0);
  }
  CHECK(net->fc_->weight.at({0, 0}) != 7.0);
  CHECK(net->running_.at({0}) == 0.0);
  // Sequential clones recursively; owned children get new objects.
  auto seq = small_net();
  auto sc = std::dynamic_pointer_cast<nn::Sequential>(seq->clone());
  REQUIRE(sc != nullptr);
  CHECK(sc->repr() == seq->repr());
  auto p0 = seq->parameters(), p1 = sc->parameters();
  REQUIRE(p0.size() == p1.size());
  for (size_t i = 0; i < p0.size(); ++i) {
    CHECK_FALSE(p0[i].shares_storage(p1[i]));
    check_close(p1[i], p0[i], 0, 0);
  }
  CHECK((*sc)[2].get() != (*seq)[2].get());
  // A plain Module subclass without Cloneable refuses.
  struct Plain : nn::Module {};
  CHECK_THROWS_WITH_AS(Plain().clone(), doctest::Contains("Cloneable"), Error);
}

TEST_CASE("module: train/eval switches Dropout recursively") {
  auto seq = small_net();
  auto drop = (*std::dynamic_pointer_cast<nn::Sequential>((*seq)[2]))[1];
  CHECK(drop->is_training());
  Tensor x = ones({64, 3});
  Tensor y = drop->forward(x);
  auto v = to_f64(y);
  int zeros_n = 0;
  for (double e : v) {
    CHECK((e == 0.0 || std::abs(e - 1.0 / 0.75) < 1e-6));
    zeros_n += e == 0.0;
  }
  CHECK(zeros_n > 10);
  CHECK(zeros_n < 90);
  seq->eval();
  CHECK_FALSE(seq->is_training());
  CHECK_FALSE(drop->is_training());
  CHECK(drop->forward(x).is_same(x));
  seq->train();
  CHECK(drop->is_training());
}

TEST_CASE("module: state_dict and load_state_dict") {
  auto a = std::make_shared<Net>();
  auto b = std::make_shared<Net>();
  nn::StateDict sd = a->state_dict();
  std::vector<std::string> keys;
  for (auto& [k, v] : sd) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"fc.bias", "fc.weight", "running", "w"});
  CHECK(sd["fc.weight"].shares_storage(a->fc_->weight));
  CHECK_FALSE(sd["fc.weight"].requires_grad());
  Tensor b_weight = b->fc_->weight;
  auto res = b->load_state_dict(sd);
  CHECK(res.missing_keys.empty());
  CHECK(res.unexpected_keys.empty());
  CHECK(b->fc_->weight.is_same(b_weight));  // copied in place
  check_close(b->fc_->weight, a->fc_->weight, 0, 0);
  CHECK(b->fc_->weight.requires_grad());
  // f64 values are cast into the f32 parameters.
  nn::StateDict sd64 = sd;
  sd64["w"] = full({3}, 0.5, kFloat64);
  b->load_state_dict(sd64);
  CHECK(b->w_.dtype() == kFloat32);
  check_close(b->w_, {0.5, 0.5, 0.5}, 0, 0);
  // Strict: every missing and unexpected key is listed.
  nn::StateDict bad = sd;
  bad.erase("w");
  bad.erase("fc.bias");
  bad["extra"] = ones({1});
  CHECK_THROWS_WITH_AS(b->load_state_dict(bad),
                       doctest::Contains("Missing key(s) in state_dict: \"fc.bias\", \"w\". "
                                         "Unexpected key(s) in state_dict: \"extra\"."),
                       Error);
  auto r2 = b->load_state_dict(bad, false);
  CHECK(r2.missing_keys == std::vector<std::string>{"fc.bias", "w"});
  CHECK(r2.unexpected_keys == std::vector<std::string>{"extra"});
  // Shape mismatch names the key and both shapes, and leaves the module untouched.
  nn::StateDict wrong = sd;
  wrong["fc.weight"] = zeros({2, 3});
  wrong["w"] = full({3}, 9.0);
  CHECK_THROWS_WITH_AS(b->load_state_dict(wrong),
                       doctest::Contains("fc.weight: copying a param with shape [2, 3] from "
                                         "checkpoint, the shape in current model is [3, 2]"),
                       Error);
  CHECK(b->w_.at({0}) == 0.5);
  // Every mismatch in one error (PyTorch lists them all): two sizes and a missing key.
  nn::StateDict several = sd;
  several["fc.weight"] = zeros({2, 3});
  several["w"] = zeros({4});
  several.erase("fc.bias");
  try {
    b->load_state_dict(several);
    FAIL("expected an error");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("Missing key(s) in state_dict: \"fc.bias\"") != std::string::npos);
    CHECK(msg.find("size mismatch for fc.weight: copying a param with shape [2, 3]") !=
          std::string::npos);
    CHECK(msg.find("size mismatch for w: copying a param with shape [4]") != std::string::npos);
  }
  CHECK(b->w_.at({0}) == 0.5);
  // "module." prefix (DataParallel checkpoints) is stripped.
  nn::StateDict pref;
  for (auto& [k, v] : sd) pref["module." + k] = v;
  pref["module.w"] = full({3}, 4.0);
  auto r3 = b->load_state_dict(pref);
  CHECK(r3.missing_keys.empty());
  CHECK(b->w_.at({2}) == 4.0);
}

TEST_CASE("module: to(dtype), zero_grad") {
  auto net = std::make_shared<Net>();
  Tensor x = ones({4, 2});
  sum(net->forward(x)).backward();
  for (auto& p : net->parameters()) REQUIRE(p.grad().defined());
  net->to(kFloat64);
  for (auto& p : net->parameters()) {
    CHECK(p.dtype() == kFloat64);
    CHECK(p.requires_grad());
    CHECK(p.is_leaf());
    CHECK(p.grad().dtype() == kFloat64);
  }
  CHECK(net->running_.dtype() == kFloat64);
  CHECK(net->fc_->weight.dtype() == kFloat64);
  CHECK(net->forward(ones({1, 2}, kFloat64)).dtype() == kFloat64);
  CHECK_THROWS_AS(net->to(kInt64), Error);
  net->zero_grad(false);
  for (auto& p : net->parameters()) check_close(p.grad(), std::vector<double>(size_t(p.numel())));
  net->zero_grad();
  for (auto& p : net->parameters()) CHECK_FALSE(p.grad().defined());
  net->to(kCPU);
  CHECK(net->w_.is_cpu());
}

TEST_CASE("module: repr matches PyTorch's print") {
  // print(nn.Sequential(nn.Conv2d(1,32,3), nn.ReLU(), nn.Conv2d(32,64,(3,5),stride=2,padding=1,
  //   dilation=2,groups=2,bias=False), nn.MaxPool2d(2), nn.AvgPool2d(3,2,1),
  //   nn.AdaptiveAvgPool2d((2,3)), nn.AdaptiveAvgPool2d(1), nn.Dropout(0.25), nn.Flatten(),
  //   nn.Sequential(nn.Linear(4,3), nn.GELU(), nn.GELU(approximate='tanh')), nn.SiLU(),
  //   nn.Tanh(), nn.Sigmoid(), nn.Softmax(dim=1), nn.Linear(3,2,bias=False)))
  const char* expected = R"(Sequential(
  (0): Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1))
  (1): ReLU()
  (2): Conv2d(32, 64, kernel_size=(3, 5), stride=(2, 2), padding=(1, 1), dilation=(2, 2), groups=2, bias=False)
  (3): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)
  (4): AvgPool2d(kernel_size=3, stride=2, padding=1)
  (5): AdaptiveAvgPool2d(output_size=(2, 3))
  (6): AdaptiveAvgPool2d(output_size=1)
  (7): Dropout(p=0.25, inplace=False)
  (8): Flatten(start_dim=1, end_dim=-1)
  (9): Sequential(
    (0): Linear(in_features=4, out_features=3, bias=True)
    (1): GELU(approximate='none')
    (2): GELU(approximate='tanh')
  )
  (10): SiLU()
  (11): Tanh()
  (12): Sigmoid()
  (13): Softmax(dim=1)
  (14): Linear(in_features=3, out_features=2, bias=False)
))";
  using namespace nn;
  auto inner = std::make_shared<Sequential>(Sequential{
      std::make_shared<Linear>(4, 3), std::make_shared<GELU>(), std::make_shared<GELU>("tanh")});
  Sequential s{
      std::make_shared<Conv2d>(1, 32, 3),
      std::make_shared<ReLU>(),
      std::make_shared<Conv2d>(
          32, 64, Size2{3, 5},
          Conv2dOptions{.stride = 2, .padding = 1, .dilation = 2, .groups = 2, .bias = false}),
      std::make_shared<MaxPool2d>(2),
      std::make_shared<AvgPool2d>(3, AvgPool2dOptions{.stride = 2, .padding = 1}),
      std::make_shared<AdaptiveAvgPool2d>(Size2{2, 3}),
      std::make_shared<AdaptiveAvgPool2d>(1),
      std::make_shared<Dropout>(0.25),
      std::make_shared<Flatten>(),
      inner,
      std::make_shared<SiLU>(),
      std::make_shared<Tanh>(),
      std::make_shared<Sigmoid>(),
      std::make_shared<Softmax>(1),
      std::make_shared<Linear>(3, 2, false)};
  CHECK(s.repr() == expected);
  std::ostringstream os;
  os << *inner;
  CHECK(os.str() == inner->repr());
  CHECK(Dropout(1.0).repr() == "Dropout(p=1.0, inplace=False)");
  // A custom module's default name is its class name.
  CHECK(std::make_shared<Net>()->repr() ==
        "Net(\n  (fc): Linear(in_features=2, out_features=3, bias=True)\n)");
}
