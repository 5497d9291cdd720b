// FSDP with optimizer param groups that split a unit (nanoGPT's AdamW: weight decay on matrices
// only): flat_param_split gives each unit one flat parameter per group, the optimizer built over
// the model's two groups moves onto the shards, and 2 ranks train like DDP with the same groups;
// without the split the move is refused naming the unit and the parameter.
#include <doctest/doctest.h>

#include <cmath>

#include "ddp_test_util.h"
#include "minidl.h"
#include "parallel/fsdp/fsdp.h"
#include "parallel/fsdp/optimizer_shards.h"
#include "test_util.h"

using namespace minidl;
using namespace minidl::dist;
using ddptest::report;

namespace {
// x:[B,T,16] -> logits [B,T,7]; two pre-LN blocks as units, the embedding and head in the root.
struct TinyLM : nn::Cloneable<TinyLM> {
  std::shared_ptr<nn::Linear> inp = std::make_shared<nn::Linear>(6, 16);
  std::shared_ptr<nn::ModuleListOf<nn::TransformerBlock>> h =
      std::make_shared<nn::ModuleListOf<nn::TransformerBlock>>();
  std::shared_ptr<nn::LayerNorm> ln_f = std::make_shared<nn::LayerNorm>(16);
  std::shared_ptr<nn::Linear> head = std::make_shared<nn::Linear>(16, 7);
  TinyLM() {
    for (int i = 0; i < 2; ++i)
      h->push_back(std::make_shared<nn::TransformerBlock>(/*n_embd=*/16, /*n_head=*/2));
    register_module("inp", &inp);
    register_module("h", &h);
    register_module("ln_f", &ln_f);
    register_module("head", &head);
  }
  Tensor forward(const Tensor& x) override {
    Tensor z = (*inp)(x);
    for (const auto& b : *h) z = (*b)(z);
    return (*head)((*ln_f)(z));
  }
};

int split_by_dim(const std::string&, const Tensor& p) {
  return p.dim() >= 2 ? 0 : 1;
}

double rel_diff(const Tensor& a, const Tensor& b) {
  Tensor d = abs(a.to(kFloat64) - b.to(kFloat64));
  const double scale = std::max(1e-6, max(abs(b.to(kFloat64))).item<double>());
  return max(d).item<double>() / scale;
}

Tensor lm_loss(const Tensor& logits, const Tensor& y) {  // logits:[B,T,7] y:[B,T]
  return cross_entropy(logits.reshape({-1, 7}), y.reshape({-1}));
}

bool trains_like_ddp(int rank, std::shared_ptr<ProcessGroup> pg, ShardingStrategy strategy) {
  manual_seed(3);
  auto ref = std::make_shared<TinyLM>();
  manual_seed(3);
  auto model = std::make_shared<TinyLM>();
  DistributedDataParallel ddp(ref, pg);
  optim::AdamW ref_opt(optim::weight_decay_groups(*ref, 0.1), 1e-2, {0.9, 0.99}, 1e-8, 0.1);
  // The optimizer over the model's own two groups, moved onto the shards after wrapping.
  optim::AdamW opt(optim::weight_decay_groups(*model, 0.1), 1e-2, {0.9, 0.99}, 1e-8, 0.1);
  const auto names = optimizer_param_names(opt, *model);
  auto fsdp = std::make_shared<FSDP>(
      model, pg,
      FSDPOptions{.sharding_strategy = strategy,
                  .auto_wrap_policy = module_wrap_policy<nn::TransformerBlock>(),
                  .flat_param_split = split_by_dim});
  shard_optimizer_params(opt, *fsdp, names);
  std::vector<std::string> unit_names;
  for (const auto& u : fsdp->units()) unit_names.push_back(u->unit_name());
  bool ok = report(
      rank, unit_names == std::vector<std::string>{"h.0", "h.0[1]", "h.1", "h.1[1]", "", "[1]"},
      "units by block and group");
  for (const auto& u : fsdp->units()) {
    const bool matrices = u->unit_name().find('[') == std::string::npos;
    for (const auto& p : u->params())
      ok = report(rank, (p.shape.size() >= 2) == matrices,
                  p.slots[0].fqn + " is in unit '" + u->unit_name() + "'") &&
           ok;
  }
  ok = report(rank,
              opt.param_groups().size() == 2 && opt.param_groups()[0].params.size() == 3 &&
                  opt.param_groups()[1].params.size() == 3,
              "each group steps three shards") &&
       ok;
  double worst = 0;
  for (int step = 0; step < 12; ++step) {
    const uint64_t seed = uint64_t(100 * step + rank);
    Tensor x = testutil::random_tensor({2, 8, 6}, kFloat32, seed);
    Tensor y = testutil::random_tensor({2, 8}, kFloat32, seed + 50, 0, 6.99).to(kInt64);
    ref_opt.zero_grad();
    Tensor ref_loss = lm_loss(ddp(x), y);
    ref_loss.backward();
    optim::clip_grad_norm_(ref->parameters(), 1.0);
    ref_opt.step();
    opt.zero_grad();
    Tensor loss = lm_loss((*fsdp)(x), y);
    loss.backward();
    fsdp->clip_grad_norm_(1.0);
    opt.step();
    worst = std::max(worst, rel_diff(loss, ref_loss));
  }
  ok = report(rank, worst <= 1e-6, "losses differ by " + std::to_string(worst)) && ok;
  const nn::StateDict full = fsdp->full_state_dict();
  for (const auto& [name, t] : ref->state_dict()) {
    auto it = full.find(name);
    if (!report(rank, it != full.end(), "full_state_dict misses " + name)) return false;
    const double d = rel_diff(it->second, t);
    ok = report(rank, d <= 1e-6, name + " differs by " + std::to_string(d)) && ok;
  }
  return ok;
}
}  // namespace

TEST_CASE("FSDP flat_param_split: AdamW's decay and no-decay groups train like DDP on 2 ranks") {
  for (ShardingStrategy s : {ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP}) {
    CAPTURE(sharding_strategy_name(s));
    ddptest::run_ranks(2, [s](int rank, std::shared_ptr<ProcessGroup> pg) {
      return trains_like_ddp(rank, pg, s);
    });
  }
}

TEST_CASE("FSDP without flat_param_split: groups that split a unit are refused by name") {
  ddptest::run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
    manual_seed(3);
    auto model = std::make_shared<TinyLM>();
    optim::AdamW opt(optim::weight_decay_groups(*model, 0.1), 1e-2);
    const auto names = optimizer_param_names(opt, *model);
    FSDP fsdp(model, pg,
              FSDPOptions{.auto_wrap_policy = module_wrap_policy<nn::TransformerBlock>()});
    std::string what;
    try {
      shard_optimizer_params(opt, fsdp, names);
    } catch (const Error& e) {
      what = e.what();
    }
    return report(rank,
                  what.find("unit '<root>' has parameters in param groups 0 and 1 ('inp.bias')") !=
                          std::string::npos &&
                      what.find("flat_param_split") != std::string::npos,
                  "refusal names the unit and the way out: " + what);
  });
}
