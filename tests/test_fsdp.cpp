// FullyShardedDataParallel on 2 and 3 CPU ranks (gloo): FULL_SHARD and SHARD_GRAD_OP train like
// DDP (per-step losses and final parameters within 1e-6, NO_SHARD bitwise on 2 ranks), units
// free their gathered parameters when the strategy says so, clip_grad_norm_ and no_sync agree
// with DDP's, the full state dict has the plain model's names, and misuse is explained.
#include <doctest/doctest.h>

#include <cmath>

#include "ddp_test_util.h"
#include "test_util.h"
#include "minidl.h"
#include "parallel/fsdp/fsdp.h"

using namespace minidl;
using namespace minidl::dist;
using ddptest::report;

namespace {
struct Block : nn::Cloneable<Block> {
  std::shared_ptr<nn::LayerNorm> ln = std::make_shared<nn::LayerNorm>(16);
  std::shared_ptr<nn::Linear> fc1 = std::make_shared<nn::Linear>(16, 33);  // odd sizes: padding
  std::shared_ptr<nn::Linear> fc2 = std::make_shared<nn::Linear>(33, 16);
  Block() {
    register_module("ln", &ln);
    register_module("fc1", &fc1);
    register_module("fc2", &fc2);
  }
  Tensor forward(const Tensor& x) override { return x + (*fc2)(gelu((*fc1)((*ln)(x)))); }
};

struct Net : nn::Cloneable<Net> {
  std::shared_ptr<nn::Linear> inp = std::make_shared<nn::Linear>(8, 16);
  std::shared_ptr<nn::ModuleListOf<Block>> blocks = std::make_shared<nn::ModuleListOf<Block>>();
  std::shared_ptr<nn::Linear> head = std::make_shared<nn::Linear>(16, 5);
  Net() {
    for (int i = 0; i < 3; ++i) blocks->push_back(std::make_shared<Block>());
    register_module("inp", &inp);
    register_module("blocks", &blocks);
    register_module("head", &head);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = (*inp)(x);
    for (const auto& b : *blocks) h = (*b)(h);
    return (*head)(h);
  }
};

Tensor batch_x(int rank, int step) {
  return testutil::random_tensor({6, 8}, kFloat32, uint64_t(1000 + 10 * step + rank));
}
Tensor batch_y(int rank, int step) {
  Tensor r = testutil::random_tensor({6}, kFloat32, uint64_t(5000 + 10 * step + rank), 0, 4.99);
  return r.to(kInt64);
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  Tensor d = abs(a.to(kFloat64) - b.to(kFloat64));
  const double scale = std::max(1e-6, max(abs(b.to(kFloat64))).item<double>());
  return max(d).item<double>() / scale;
}

// 20 steps of DDP and of FSDP(strategy) from the same weights and data, AdamW with weight
// decay (and clipping at 1.0: the two norms are summed in different orders, so not bitwise);
// the largest relative differences of the losses and of the final parameters.
bool trains_like_ddp(int rank, std::shared_ptr<ProcessGroup> pg, ShardingStrategy strategy,
                     double tol, bool clip = true) {
  manual_seed(42);
  auto ref = std::make_shared<Net>();
  manual_seed(42);
  auto model = std::make_shared<Net>();
  DistributedDataParallel ddp(ref, pg);
  optim::AdamW ref_opt(ref->parameters(), 1e-2, {0.9, 0.999}, 1e-8, 0.01);
  auto fsdp = std::make_shared<FSDP>(
      model, pg,
      FSDPOptions{.sharding_strategy = strategy, .auto_wrap_policy = module_wrap_policy<Block>()});
  optim::AdamW opt(fsdp->parameters(), 1e-2, {0.9, 0.999}, 1e-8, 0.01);
  bool ok = report(rank, fsdp->units().size() == 4, "3 block units + the root");
  double worst_loss = 0, worst_norm = 0;
  for (int step = 0; step < 20; ++step) {
    Tensor x = batch_x(rank, step), y = batch_y(rank, step);
    ref_opt.zero_grad();
    Tensor ref_loss = cross_entropy(ddp(x), y);
    ref_loss.backward();
    const double ref_norm =
        clip ? optim::clip_grad_norm_(ref->parameters(), 1.0).item<double>() : 1.0;
    ref_opt.step();
    opt.zero_grad();
    Tensor loss = cross_entropy((*fsdp)(x), y);
    loss.backward();
    const double norm = clip ? fsdp->clip_grad_norm_(1.0).item<double>() : 1.0;
    opt.step();
    worst_loss = std::max(worst_loss, max_rel_diff(loss, ref_loss));
    worst_norm = std::max(worst_norm, std::abs(norm - ref_norm) / ref_norm);
  }
  ok = report(rank, worst_loss <= tol, "losses differ by " + std::to_string(worst_loss)) && ok;
  ok = report(rank, worst_norm <= 1e-6, "grad norms differ by " + std::to_string(worst_norm)) && ok;
  const nn::StateDict full = fsdp->full_state_dict(), want = ref->state_dict();
  ok = report(rank, full.size() == want.size(), "full_state_dict has the model's keys") && ok;
  for (const auto& [name, t] : want) {
    auto it = full.find(name);
    if (!report(rank, it != full.end(), "missing " + name)) return false;
    const double d = max_rel_diff(it->second, t);
    ok = report(rank, d <= tol, name + " differs by " + std::to_string(d)) && ok;
  }
  return ok;
}
}  // namespace

TEST_CASE("FSDP FULL_SHARD trains like DDP on 2 and 3 ranks") {
  for (int world : {2, 3}) {
    CAPTURE(world);
    ddptest::run_ranks(world, [](int rank, std::shared_ptr<ProcessGroup> pg) {
      return trains_like_ddp(rank, pg, ShardingStrategy::FULL_SHARD, 1e-6);
    });
  }
}

TEST_CASE("FSDP SHARD_GRAD_OP trains like DDP on 2 and 3 ranks") {
  for (int world : {2, 3}) {
    CAPTURE(world);
    ddptest::run_ranks(world, [](int rank, std::shared_ptr<ProcessGroup> pg) {
      return trains_like_ddp(rank, pg, ShardingStrategy::SHARD_GRAD_OP, 1e-6);
    });
  }
}

TEST_CASE("FSDP NO_SHARD is DDP: bitwise on 2 ranks") {
  ddptest::run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
    return trains_like_ddp(rank, pg, ShardingStrategy::NO_SHARD, 0.0, /*clip=*/false) &&
           trains_like_ddp(rank, pg, ShardingStrategy::NO_SHARD, 1e-6);
  });
}

TEST_CASE("FSDP frees gathered parameters: FULL_SHARD after each unit's forward and backward") {
  ddptest::run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
    bool ok = true;
    for (ShardingStrategy s : {ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP}) {
      manual_seed(1);
      auto fsdp = std::make_shared<FSDP>(
          std::make_shared<Net>(), pg,
          FSDPOptions{.sharding_strategy = s, .auto_wrap_policy = module_wrap_policy<Block>()});
      const auto& units = fsdp->units();
      // Shards: ceil(numel / 2) each; the padding makes 2 * shard >= numel.
      for (const auto& u : units)
        ok = report(rank, u->shard_numel() == (u->numel() + 1) / 2, "shard size") && ok;
      Tensor loss = sum((*fsdp)(batch_x(rank, 0)));
      const bool full = s == ShardingStrategy::FULL_SHARD;
      ok = report(rank, units[0]->gathered() == !full, "block unit after forward") && ok;
      ok = report(rank, units.back()->gathered(), "the root stays gathered until backward") && ok;
      loss.backward();
      for (const auto& u : units)
        ok = report(rank, !u->gathered(), "freed after backward: " + u->unit_name()) && ok;
      ok = report(rank, units[0]->gathers == (full ? 2 : 1), "FULL_SHARD gathers twice") && ok;
      ok = report(rank, units[0]->reductions == 1, "one reduce-scatter per unit") && ok;
      {
        NoGradGuard ng;  // evaluation: nothing stays gathered
        (*fsdp)(batch_x(rank, 1));
        for (const auto& u : units) ok = report(rank, !u->gathered(), "eval frees") && ok;
      }
      // Using a wrapped layer outside its unit's forward is an error, not a read of freed memory.
      auto* net = dynamic_cast<Net*>(&fsdp->module());
      try {
        (*net->head)(batch_x(rank, 0).narrow(1, 0, 8).matmul(ones({8, 16})));
        ok = report(rank, false, "a released parameter was read");
      } catch (const Error& e) {
        ok = report(rank, std::string(e.what()).find("memory was released") != std::string::npos,
                    e.what()) &&
             ok;
      }
    }
    return ok;
  });
}

TEST_CASE("FSDP no_sync accumulates like DDP's no_sync") {
  ddptest::run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
    manual_seed(3);
    auto ref = std::make_shared<Net>();
    manual_seed(3);
    DistributedDataParallel ddp(ref, pg);
    auto fsdp = std::make_shared<FSDP>(
        std::make_shared<Net>(), pg, FSDPOptions{.auto_wrap_policy = module_wrap_policy<Block>()});
    {
      auto a = ddp.no_sync();
      cross_entropy(ddp(batch_x(rank, 0)), batch_y(rank, 0)).backward();
    }
    cross_entropy(ddp(batch_x(rank, 1)), batch_y(rank, 1)).backward();
    {
      auto a = fsdp->no_sync();
      cross_entropy((*fsdp)(batch_x(rank, 0)), batch_y(rank, 0)).backward();
      bool none = true;
      for (const auto& u : fsdp->units()) none = none && !u->shard().grad().defined();
      if (!report(rank, none, "no shard gradient inside no_sync")) return false;
    }
    cross_entropy((*fsdp)(batch_x(rank, 1)), batch_y(rank, 1)).backward();
    const double ref_norm = optim::clip_grad_norm_(ref->parameters(), 1e9).item<double>();
    const double norm = fsdp->clip_grad_norm_(1e9).item<double>();
    return report(
        rank, std::abs(norm - ref_norm) <= 1e-6 * ref_norm,
        "accumulated gradient norms " + std::to_string(norm) + " vs " + std::to_string(ref_norm));
  });
}

TEST_CASE("FSDP: size-based policy, tied parameters across units are refused") {
  ddptest::run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
    bool ok = true;
    {
      manual_seed(5);
      auto fsdp = std::make_shared<FSDP>(
          std::make_shared<Net>(), pg,
          FSDPOptions{.auto_wrap_policy = size_based_auto_wrap_policy(1000)});
      // Each Block has 16*2 + 16*33 + 33 + 33*16 + 16 = 1137 parameters: a unit each.
      ok = report(rank, fsdp->units().size() == 4, "size policy: 3 blocks + root") && ok;
    }
    auto net = std::make_shared<Net>();
    (*net->blocks)[1]->fc1->weight = (*net->blocks)[0]->fc1->weight;  // tied across blocks
    try {
      FSDP bad(net, pg, FSDPOptions{.auto_wrap_policy = module_wrap_policy<Block>()});
      ok = report(rank, false, "a parameter tied across units was accepted");
    } catch (const Error& e) {
      ok = report(rank,
                  std::string(e.what()).find("tied parameters must be in one unit") !=
                      std::string::npos,
                  e.what()) &&
           ok;
    }
    return ok;
  });
}

TEST_CASE("FSDP FULL_SHARD: a step's peak memory is below DDP's for a parameter-heavy model") {
  // 12 wide blocks, a batch of 2: parameters, gradients and AdamW's state dominate the step.
  struct Wide : nn::Cloneable<Wide> {
    std::shared_ptr<nn::ModuleListOf<Block>> blocks = std::make_shared<nn::ModuleListOf<Block>>();
    Wide() {
      for (int i = 0; i < 12; ++i) blocks->push_back(std::make_shared<Block>());
      register_module("blocks", &blocks);
    }
    Tensor forward(const Tensor& x) override {
      Tensor h = x;
      for (const auto& b : *blocks) h = (*b)(h);
      return h;
    }
  };
  ddptest::run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
    const Device cpu = kCPU;
    auto step_peak = [&](auto& model, optim::Optimizer& opt) {
      Tensor x = testutil::random_tensor({2, 16}, kFloat32, 7);
      for (int s = 0; s < 2; ++s) {  // the second step has the optimizer state
        reset_peak_memory_stats(cpu);
        opt.zero_grad();
        sum(square(model(x))).backward();
        opt.step();
        if (s == 1) return memory_stats(cpu).peak;  // every live allocation of this rank
      }
      return int64_t(0);
    };
    int64_t ddp_peak = 0, fsdp_peak = 0;
    {
      manual_seed(0);
      auto m = std::make_shared<Wide>();
      DistributedDataParallel ddp(m, pg);
      optim::AdamW opt(m->parameters(), 1e-3);
      ddp_peak = step_peak(ddp, opt);
    }
    {
      manual_seed(0);
      auto fsdp =
          std::make_shared<FSDP>(std::make_shared<Wide>(), pg,
                                 FSDPOptions{.auto_wrap_policy = module_wrap_policy<Block>()});
      optim::AdamW opt(fsdp->parameters(), 1e-3);
      fsdp_peak = step_peak(*fsdp, opt);
    }
    std::fprintf(stderr, "[rank %d] step peak: DDP %lld bytes, FSDP FULL_SHARD %lld bytes\n", rank,
                 (long long)ddp_peak, (long long)fsdp_peak);
    return report(
        rank, fsdp_peak < ddp_peak * 0.75,
        "FULL_SHARD peak " + std::to_string(fsdp_peak) + " vs DDP " + std::to_string(ddp_peak));
  });
}

TEST_CASE("FSDP prefetches the next unit's all-gather in forward and in backward") {
  ddptest::run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
    manual_seed(2);
    auto fsdp = std::make_shared<FSDP>(
        std::make_shared<Net>(), pg, FSDPOptions{.auto_wrap_policy = module_wrap_policy<Block>()});
    optim::SGD opt(fsdp->parameters(), 0.1);
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      cross_entropy((*fsdp)(batch_x(rank, step)), batch_y(rank, step)).backward();
      opt.step();
    }
    bool ok = true;
    const auto& units = fsdp->units();
    // 3 steps x (forward + backward) gathers per block. Prefetched: in forward each block by
    // the unit before it (not in the first forward, which learns the order); in backward each
    // block by the block after it (the last block's backward gather comes first, unprefetched).
    const int64_t want[] = {5, 5, 2};
    for (size_t i = 0; i < 3; ++i) {
      ok = report(rank, units[i]->gathers == 6, "gathers of " + units[i]->unit_name()) && ok;
      ok = report(rank, units[i]->prefetched == want[i],
                  units[i]->unit_name() + " prefetched " + std::to_string(units[i]->prefetched)) &&
           ok;
    }
    return ok;
  });
}
