// The module call path: several tensor inputs (forward(x, mask)) through operator(), DDP,
// DataParallel and the Accelerator, each training like the single-process reference; forward
// pre-hooks and hooks (order, replacement, removal, copies in clone); Module::apply.
#include <doctest/doctest.h>

#include "ddp_test_util.h"
#include "dist_test_util.h"
#include "parallel/accelerator/accelerator.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel_test_models.h"

using namespace minidl;
using disttest::contains;

namespace {

// x:[B,6], mask:[B,3] -> fc(relu(fc0(x))) * mask: [B,3]. One forward for two inputs (a
// PyTorch user's forward(self, x, mask)).
class MaskNet : public nn::Cloneable<MaskNet> {
 public:
  MaskNet() {
    fc0 = std::make_shared<nn::Linear>(6, 5);
    register_module("fc0", &fc0);
    fc = std::make_shared<nn::Linear>(5, 3);
    register_module("fc", &fc);
  }
  Tensor forward(const Tensor& x, const Tensor& mask) { return mul((*fc)(relu((*fc0)(x))), mask); }
  std::string name() const override { return "MaskNet"; }
  std::shared_ptr<nn::Linear> fc0, fc;
};

Tensor mask_x(int step, int64_t rows) {
  return testutil::random_tensor({rows, 6}, kFloat32, 300 + uint64_t(step));
}
Tensor mask_m(int step, int64_t rows) {  // 0/1 entries
  return gt(testutil::random_tensor({rows, 3}, kFloat32, 400 + uint64_t(step)), 0.0).to(kFloat32);
}
Tensor mask_loss(const Tensor& out) {
  return mean(mul(out, out));
}

}  // namespace

TEST_CASE("module call: a two-input forward through operator(), call and forward_inputs") {
  manual_seed(3);
  auto net = std::make_shared<MaskNet>();
  Tensor x = mask_x(0, 4), m = mask_m(0, 4);
  Tensor direct = net->forward(x, m);
  CHECK(equal((*net)(x, m), direct));
  CHECK(equal(net->call({x, m}), direct));
  nn::Module& base = *net;
  CHECK(equal(base.forward_inputs({x, m}), direct));
  // The mask reaches the output: masked rows/columns are exactly zero.
  CHECK(equal(mul(direct, sub(ones_like(m), m)), zeros_like(direct)));
  // Wrong arity: the error names the module and the arities it takes.
  auto err = disttest::expect_error([&] { base.forward_inputs({x}); });
  CHECK(contains(err.message, "MaskNet: forward called with 1 tensor(s)"));
  CHECK(contains(err.message, "takes 2"));
  // A one-input module called with two inputs.
  nn::Linear lin(6, 3);
  err = disttest::expect_error([&] { lin(x, m); });
  CHECK(contains(err.message, "Linear: forward called with 2 tensor(s)"));
}

TEST_CASE("module call: forward pre-hooks and hooks run in order, replace and are removable") {
  manual_seed(3);
  nn::Linear lin(4, 2);
  Tensor x = testutil::random_tensor({3, 4}, kFloat32, 9);
  std::vector<std::string> order;
  auto pre = lin.register_forward_pre_hook(
      [&](nn::Module& m, const std::vector<Tensor>& in) -> std::optional<std::vector<Tensor>> {
        order.push_back("pre:" + m.name());
        return std::vector<Tensor>{mul(in[0], 2.0)};  // replaces the input
      });
  auto post = lin.register_forward_hook(
      [&](nn::Module&, const std::vector<Tensor>& in, const Tensor& out) -> std::optional<Tensor> {
        order.push_back("post");
        CHECK(equal(in[0], mul(x, 2.0)));  // the hook sees the replaced input
        return add(out, 1.0);              // replaces the output
      });
  auto seen = lin.register_forward_hook(
      [&](nn::Module&, const std::vector<Tensor>&, const Tensor&) -> std::optional<Tensor> {
        order.push_back("post2");
        return std::nullopt;  // keeps the output
      });
  Tensor y = lin(x);
  CHECK(order == std::vector<std::string>{"pre:Linear", "post", "post2"});
  CHECK(allclose(y, add(lin.forward(mul(x, 2.0)), 1.0)));
  // forward() itself does not run hooks (as torch's module.forward(x)).
  order.clear();
  CHECK(equal(lin.forward(x), linear(x, lin.weight, lin.bias)));
  CHECK(order.empty());
  // clone() copies the hooks into the copy's own list.
  auto copy = lin.clone();
  pre.remove();
  post.remove();
  order.clear();
  CHECK(equal(lin(x), lin.forward(x)));
  CHECK(order == std::vector<std::string>{"post2"});
  order.clear();
  (*copy)(x);
  CHECK(order == std::vector<std::string>{"pre:Linear", "post", "post2"});
  seen.remove();
  seen.remove();  // twice: no effect
}

TEST_CASE("module call: apply visits every submodule, children first, then the module") {
  auto net = std::make_shared<ptest::SmallNet>(/*batch_norm=*/true);
  std::vector<std::string> names;
  net->apply([&](nn::Module& m) { names.push_back(m.name()); });
  CHECK(names == std::vector<std::string>{"Conv2d", "BatchNorm2d", "Linear", "SmallNet"});
  // Custom initialisation, as torch's model.apply(init_weights).
  net->apply([](nn::Module& m) {
    if (auto* lin = dynamic_cast<nn::Linear*>(&m)) {
      NoGradGuard g;
      lin->weight.fill_(0.5);
    }
  });
  CHECK(equal(net->fc->weight, full_like(net->fc->weight, 0.5)));
}

TEST_CASE(
    "data_parallel: a two-input model trains like one device, the inputs scattered together") {
  manual_seed(5);
  auto src = std::make_shared<MaskNet>();
  auto ref = src->clone();
  int hook_calls = 0;
  src->register_forward_hook([&](nn::Module&, const std::vector<Tensor>& in, const Tensor&) {
    CHECK(in.size() == 2);
    CHECK(in[0].size(0) == in[1].size(0));
    ++hook_calls;
    return std::optional<Tensor>();
  });
  dist::DataParallel dp(src, {kCPU, kCPU});
  for (int s = 0; s < 3; ++s) {
    Tensor x = mask_x(s, 6), m = mask_m(s, 6);
    Tensor out = dp(x, m);
    REQUIRE(out.shape() == Shape{6, 3});
    mask_loss(out).backward();
    ptest::sgd_step(*src);
    mask_loss((*ref)(x, m)).backward();
    ptest::sgd_step(*ref);
  }
  // Each replica runs the module's hooks, as torch's replicas do: replica 0 is the source
  // module, replica 1 its clone with a copy of the hook (the same counter): 2 per forward.
  CHECK(hook_calls == 6);
  const double err = ptest::max_rel_diff(src->state_dict(), ref->state_dict());
  MESSAGE("DataParallel {cpu,cpu} two-input model vs one device: max rel error " << err);
  CHECK(err <= 1e-6);
  auto e = disttest::expect_error([&] { dp(mask_x(0, 6), mask_m(0, 4)); });
  CHECK(contains(e.message, "same batch size"));
  CHECK(contains(e.message, "[6, 6]"));
  CHECK(contains(e.message, "[4, 3]"));
}

TEST_CASE("ddp: a two-input model on 2 ranks equals one process on the global batch") {
  ddptest::run_ranks(2, [](int rank, std::shared_ptr<dist::ProcessGroup> pg) {
    manual_seed(11);
    auto model = std::make_shared<MaskNet>();
    auto ref = model->clone();
    int hook_calls = 0;
    model->register_forward_pre_hook([&](nn::Module&, const std::vector<Tensor>&) {
      ++hook_calls;
      return std::optional<std::vector<Tensor>>();
    });
    dist::DistributedDataParallel ddp(model, pg);
    for (int s = 0; s < 3; ++s) {
      Tensor x = mask_x(s, 8), m = mask_m(s, 8);  // the global batch; this rank's half
      mask_loss(ddp(x.narrow(0, 4 * rank, 4), m.narrow(0, 4 * rank, 4))).backward();
      ptest::sgd_step(*model);
      mask_loss((*ref)(x, m)).backward();
      ptest::sgd_step(*ref);
    }
    const double err = ptest::max_rel_diff(model->state_dict(), ref->state_dict());
    return ddptest::report(rank, err <= 1e-5, "params match the global-batch reference") &&
           ddptest::report(rank, hook_calls == 3, "the module's pre-hook ran in each forward") &&
           ddptest::report(rank, ddp.stats().steps == 3, "three synchronised steps");
  });
}

TEST_CASE("accelerator: a two-input model in single and dp mode trains like the hand loop") {
  for (const char* mode : {"single", "dp"}) {
    CAPTURE(mode);
    manual_seed(13);
    auto model = std::make_shared<MaskNet>();
    auto ref = model->clone();
    Accelerator acc({.mode = mode, .devices = 2, .seed = 13});
    optim::SGD opt(model->parameters(), 0.1);
    acc.prepare(model, opt);
    optim::SGD ref_opt(ref->parameters(), 0.1);
    for (int s = 0; s < 3; ++s) {
      Tensor x = mask_x(s, 6), m = mask_m(s, 6);
      acc.zero_grad();
      acc.backward(mask_loss(acc.forward(x, m)));
      acc.step();
      ref_opt.zero_grad();
      mask_loss((*ref)(x, m)).backward();
      ref_opt.step();
    }
    CHECK(ptest::max_rel_diff(model->state_dict(), ref->state_dict()) <= 1e-6);
  }
}
