// Apex-style opt levels (optim/amp.h): O0 equals fp32 bitwise, O1 autocasts with fp32
// weights, O2 keeps fp32 masters beside a half model (norms fp32) and copies them back, skipped
// steps change nothing, O3 is all half without scaling, bf16 never scales, state round trip;
// 2-rank DDP with fp16 O2 makes one skip decision on every rank.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "ddp_test_util.h"
#include "minidl.h"
#include "test_util.h"
#include "optim/amp.h"
#include "parallel_test_models.h"
#include "skip.h"

using namespace minidl;
using ptest::SmallNet;

namespace {

// One training step through Amp on the deterministic batch `s`; returns whether it applied.
bool amp_step(amp::Amp& a, nn::Module& model, optim::Optimizer& opt, int s,
              bool inject_inf = false) {
  opt.zero_grad();
  Tensor loss;
  {
    auto region = a.autocast_region();
    loss =
        nn::functional::cross_entropy(a.forward(model, ptest::batch_x(s, 8)), ptest::batch_y(s, 8));
  }
  a.backward(loss);
  if (inject_inf) {
    NoGradGuard g;
    Tensor& grad = model.parameters()[0].mutable_grad();
    grad.view({-1}).narrow(0, 0, 1).fill_(INFINITY);
  }
  return a.step();
}

std::vector<Tensor> snapshot(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.detach().clone());
  return out;
}

}  // namespace

TEST_CASE("amp_levels: opt level names") {
  CHECK(amp::parse_opt_level("O2") == amp::OptLevel::O2);
  CHECK(amp::opt_level_name(amp::OptLevel::O3) == "O3");
  CHECK_THROWS_WITH_AS(amp::parse_opt_level("02"), doctest::Contains("O0, O1, O2 or O3"), Error);
  auto model = std::make_shared<SmallNet>();
  optim::SGD opt(model->parameters(), 0.1);
  CHECK_THROWS_WITH_AS(amp::initialize(*model, opt, "O1", kFloat32),
                       doctest::Contains("float16 or bfloat16"), Error);
}

TEST_CASE("amp_levels: O0 equals the fp32 run bitwise") {
  manual_seed(3);
  auto ref = std::make_shared<SmallNet>(true);
  manual_seed(3);
  auto model = std::make_shared<SmallNet>(true);
  optim::AdamW opt_ref(ref->parameters(), 1e-2);
  optim::AdamW opt(model->parameters(), 1e-2);
  auto a = amp::initialize(*model, opt, "O0", kFloat16);
  CHECK_FALSE(a->scaling());
  for (int s = 0; s < 5; ++s) {
    opt_ref.zero_grad();
    nn::functional::cross_entropy(ref->forward(ptest::batch_x(s, 8)), ptest::batch_y(s, 8))
        .backward();
    opt_ref.step();
    CHECK(amp_step(*a, *model, opt, s));
  }
  auto p = model->parameters(), q = ref->parameters();
  for (size_t i = 0; i < p.size(); ++i) CHECK(testutil::bitwise_equal(p[i], q[i]));
}

TEST_CASE("amp_levels: O1 keeps fp32 weights and gradients, autocasts the forward") {
  manual_seed(4);
  auto model = std::make_shared<SmallNet>();
  optim::SGD opt(model->parameters(), 0.05);
  auto a = amp::initialize(*model, opt, "O1", kBFloat16);
  CHECK_FALSE(a->scaling());  // bf16 has fp32's range: no loss scaling
  {
    auto region = a->autocast_region();
    CHECK(model->forward(ptest::batch_x(0, 4)).dtype() == kBFloat16);
  }
  CHECK(amp_step(*a, *model, opt, 0));
  for (const Tensor& p : model->parameters()) CHECK(p.dtype() == kFloat32);
  auto f16 = std::make_shared<SmallNet>();
  optim::SGD opt16(f16->parameters(), 0.05);
  auto b = amp::initialize(*f16, opt16, "O1", kFloat16);
  CHECK(b->scaling());
  CHECK(b->scaler().get_scale() == 65536.0);
}

TEST_CASE("amp_levels: O2 half model with fp32 norms and fp32 master weights") {
  manual_seed(5);
  auto model = std::make_shared<SmallNet>(/*batch_norm=*/true);
  const auto initial = snapshot(model->parameters());
  optim::SGD opt(model->parameters(), 0.05, 0.9);
  amp::AmpOptions ao;
  ao.opt_level = amp::OptLevel::O2;
  ao.dtype = kFloat16;
  ao.scaler.init_scale = 1024;
  auto a = amp::initialize(*model, opt, ao);
  CHECK(model->conv->weight.dtype() == kFloat16);
  CHECK(model->fc->weight.dtype() == kFloat16);
  CHECK(model->bn->weight.dtype() == kFloat32);  // normalisation stays fp32
  CHECK(model->bn->running_var.dtype() == kFloat32);
  const auto& masters = a->master_params();
  REQUIRE(masters.size() == 4);  // conv w/b, fc w/b
  for (const Tensor& m : masters) CHECK(m.dtype() == kFloat32);
  CHECK(
      testutil::bitwise_equal(masters[0], initial[0]));  // exact fp32 values, not rounded via half
  // The optimizer steps the masters (and the fp32 norm parameters), not the half tensors.
  for (const Tensor& p : opt.param_groups()[0].params) CHECK(p.dtype() == kFloat32);
  double first = 0, last = 0;
  for (int s = 0; s < 30; ++s) {
    opt.zero_grad();
    Tensor loss;
    loss = nn::functional::cross_entropy(a->forward(*model, ptest::batch_x(0, 8)),
                                         ptest::batch_y(0, 8));
    CHECK(loss.dtype() == kFloat32);  // outputs cast back to fp32
    (s == 0 ? first : last) = loss.item<double>();
    a->backward(loss);
    CHECK(a->step());
    CHECK_FALSE(model->conv->weight.grad().defined());  // consumed into the masters
    CHECK(testutil::bitwise_equal(model->conv->weight, masters[0].to(kFloat16)));
  }
  CHECK(last < 0.5 * first);
}

TEST_CASE("amp_levels: an O2 overflow skips the step and changes nothing but the scale") {
  manual_seed(6);
  auto model = std::make_shared<SmallNet>(true);
  optim::AdamW opt(model->parameters(), 1e-3);
  auto a = amp::initialize(*model, opt, "O2", kFloat16);
  REQUIRE(amp_step(*a, *model, opt, 0));
  const auto params = snapshot(model->parameters());
  const auto masters = snapshot(a->master_params());
  const auto state = opt.state_dict();
  std::map<std::string, Tensor> state_copy;
  for (const auto& [k, v] : state) state_copy[k] = v.clone();
  const double scale = a->scaler().get_scale();
  CHECK_FALSE(amp_step(*a, *model, opt, 1, /*inject_inf=*/true));
  CHECK(a->scaler().get_scale() == scale * 0.5);
  CHECK(a->scaler().skipped_steps() == 1);
  auto now = model->parameters();
  for (size_t i = 0; i < now.size(); ++i) CHECK(testutil::bitwise_equal(now[i], params[i]));
  for (size_t i = 0; i < masters.size(); ++i)
    CHECK(testutil::bitwise_equal(a->master_params()[i], masters[i]));
  for (const auto& [k, v] : opt.state_dict())
    CHECK_MESSAGE(testutil::bitwise_equal(v, state_copy.at(k)), k);
  CHECK(amp_step(*a, *model, opt, 2));
}

TEST_CASE("amp_levels: O3 is all half with loss scale 1") {
  manual_seed(7);
  auto model = std::make_shared<SmallNet>(true);
  optim::SGD opt(model->parameters(), 0.05);
  auto a = amp::initialize(*model, opt, "O3", kFloat16);
  for (const Tensor& p : model->parameters()) CHECK(p.dtype() == kFloat16);
  CHECK_FALSE(a->scaling());
  CHECK(a->scaler().get_scale() == 1.0);
  CHECK(a->master_params().empty());
  CHECK(amp_step(*a, *model, opt, 0));
}

TEST_CASE("amp_levels: state_dict restores masters and the scaler exactly") {
  auto make = [](uint64_t seed) {
    manual_seed(seed);
    return std::make_shared<SmallNet>(true);
  };
  auto model = make(8);
  optim::SGD opt(model->parameters(), 0.05, 0.9);
  amp::AmpOptions ao;
  ao.opt_level = amp::OptLevel::O2;
  ao.dtype = kFloat16;
  ao.scaler.growth_interval = 2;
  auto a = amp::initialize(*model, opt, ao);
  for (int s = 0; s < 5; ++s) amp_step(*a, *model, opt, s, s == 3);
  auto sd = a->state_dict();
  CHECK(sd.count("scaler.scale"));
  CHECK(sd.count("master.0"));

  auto other = make(9);
  optim::SGD opt2(other->parameters(), 0.05, 0.9);
  auto b = amp::initialize(*other, opt2, ao);
  b->load_state_dict(sd);
  CHECK(b->scaler().get_scale() == a->scaler().get_scale());
  CHECK(b->scaler().growth_tracker() == a->scaler().growth_tracker());
  for (size_t i = 0; i < a->master_params().size(); ++i)
    CHECK(testutil::bitwise_equal(a->master_params()[i], b->master_params()[i]));
  auto o1 = make(10);
  optim::SGD opt3(o1->parameters(), 0.05);
  auto c = amp::initialize(*o1, opt3, "O1", kFloat16);
  CHECK_THROWS_WITH_AS(c->load_state_dict(sd), doctest::Contains("opt level O2"), Error);
}

#if MINIDL_WITH_GLOO
TEST_CASE("amp_levels: 2-rank DDP with fp16 O2 skips together and stays bitwise equal") {
  using namespace ddptest;
  run_ranks(2, [](int rank, std::shared_ptr<dist::ProcessGroup> pg) {
    manual_seed(12);
    auto model = std::make_shared<SmallNet>(true);
    optim::SGD opt(model->parameters(), 0.05, 0.9);
    auto a = amp::initialize(*model, opt, "O2", kFloat16);  // before DDP: buckets in fp16
    dist::DistributedDataParallel ddp(model, pg);
    bool ok = true;
    for (int s = 0; s < 6; ++s) {
      opt.zero_grad();
      Tensor x = ptest::batch_x(s, 8).narrow(0, rank * 4, 4);
      Tensor y = ptest::batch_y(s, 8).narrow(0, rank * 4, 4);
      // An overflow on one rank only: 1e30 is inf in fp16, so rank 1's loss and gradients are
      // non-finite and the allreduce carries that to rank 0.
      if (s == 2 && rank == 1) x = x * 1e30;
      Tensor loss = nn::functional::cross_entropy(a->forward(ddp, x), y);
      a->backward(loss);
      // A gradient that arrived through the fp16 allreduce is fp16.
      ok = report(rank, model->fc->weight.grad().dtype() == kFloat16, "fp16 grads") && ok;
      const bool applied = a->step();
      ok = report(rank, applied == (s != 2), "step " + std::to_string(s) + " skip decision") && ok;
    }
    ok = report(rank, a->scaler().skipped_steps() == 1, "one skipped step") && ok;
    ok = report(rank, same_on_all_ranks(*pg, flat(model->parameters())), "params equal") && ok;
    return report(rank, same_on_all_ranks(*pg, flat(a->master_params())), "masters equal") && ok;
  });
}
#else
TEST_CASE("amp_levels: the 2-rank DDP case needs Gloo") {
  MINIDL_SKIP(testutil::kNoGloo);
}
#endif
