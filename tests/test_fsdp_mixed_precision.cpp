// FSDP's MixedPrecision and sharded GradScaler on 2 CPU ranks (gloo): units compute in bf16
// gathered from f32 shards (bitwise the bf16 model's forward), gradients land in the f32 shards,
// buffers take buffer_dtype; an inf in one rank's shard makes every rank skip the step.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "ddp_test_util.h"
#include "minidl.h"
#include "parallel/fsdp/fsdp.h"
#include "parallel/fsdp/optimizer_shards.h"
#include "parallel_test_models.h"

using namespace minidl;
using namespace minidl::dist;
using ddptest::report;

namespace {
constexpr uint64_t kSeed = 5;

FSDPOptions options(std::optional<DType> param_dtype, std::optional<DType> buffer_dtype) {
  FSDPOptions o;
  o.auto_wrap_policy = module_wrap_policy<nn::Linear>();  // fc; conv and bn in the root
  o.mixed_precision.param_dtype = param_dtype;
  o.mixed_precision.reduce_dtype = kFloat32;
  o.mixed_precision.buffer_dtype = buffer_dtype;
  return o;
}

// Per-step losses of 10 SGD steps on one batch of SmallNet (with BatchNorm) under FSDP FULL_SHARD.
std::vector<double> losses(std::shared_ptr<ProcessGroup> pg, int rank,
                           std::optional<DType> param_dtype) {
  manual_seed(kSeed);
  auto model = std::make_shared<ptest::SmallNet>(/*batch_norm=*/true);
  auto fsdp = std::make_shared<FSDP>(model, pg, options(param_dtype, param_dtype));
  optim::SGD opt(fsdp->parameters(), 0.05, 0.9);
  std::vector<double> out;
  for (int step = 0; step < 10; ++step) {
    opt.zero_grad();
    // One batch per rank, every step: the f32 run must fit it (a fresh batch each step would
    // make "it learns" a matter of luck).
    Tensor x = ptest::batch_x(rank, 8), y = ptest::batch_y(rank, 8);
    Tensor loss = cross_entropy((*fsdp)(x).to(kFloat32), y);
    loss.backward();
    opt.step();
    out.push_back(loss.item<double>());
  }
  return out;
}
}  // namespace

TEST_CASE("FSDP MixedPrecision: bf16 compute gathered from f32 shards, f32 gradients") {
  ddptest::run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
    bool ok = true;
    manual_seed(kSeed);
    auto model = std::make_shared<ptest::SmallNet>(/*batch_norm=*/true);
    manual_seed(kSeed);
    auto ref = std::make_shared<ptest::SmallNet>(/*batch_norm=*/true);
    ref->to(kBFloat16);
    auto fsdp = std::make_shared<FSDP>(model, pg, options(kBFloat16, kBFloat16));
    DType seen = kFloat32;
    auto hook = model->fc->register_forward_pre_hook(
        [&](nn::Module& m, const std::vector<Tensor>&) -> std::optional<std::vector<Tensor>> {
          seen = m.named_parameters(false).front().second.dtype();
          return std::nullopt;
        });
    for (const Tensor& s : fsdp->parameters())
      ok = report(rank, s.dtype() == kFloat32, "the shards stay f32") && ok;
    ok =
        report(rank, model->bn->running_mean.dtype() == kBFloat16, "buffers in buffer_dtype") && ok;
    Tensor x = ptest::batch_x(rank, 8), y = ptest::batch_y(rank, 8);
    Tensor out = (*fsdp)(x);  // x is cast to bf16 (cast_forward_inputs)
    ok = report(rank, seen == kBFloat16, "fc computes with bf16 weights") && ok;
    ok = report(rank, out.dtype() == kBFloat16, "the output is bf16") && ok;
    ok = report(rank, equal(out, (*ref)(x.to(kBFloat16))),
                "the forward is bitwise the bf16 model's") &&
         ok;
    cross_entropy(out.to(kFloat32), y).backward();
    for (const Tensor& s : fsdp->parameters())
      ok = report(rank,
                  s.grad().defined() && s.grad().dtype() == kFloat32 &&
                      std::isfinite(sum(s.grad().to(kFloat64)).item<double>()),
                  "each shard gets a finite f32 gradient") &&
           ok;
    hook.remove();
    // Training: near the f32 run, but not it (bf16 rounding shows).
    const std::vector<double> half = losses(pg, rank, kBFloat16), full = losses(pg, rank, {});
    double worst = 0;
    for (size_t i = 0; i < half.size(); ++i)
      worst = std::max(worst, std::abs(half[i] - full[i]) / std::abs(full[i]));
    ok = report(rank, worst < 5e-2, "bf16 losses within 5e-2 of f32: " + std::to_string(worst)) &&
         ok;
    ok = report(rank, worst > 0, "bf16 losses differ from f32 at all") && ok;
    ok = report(rank, full.back() < full.front(), "the f32 run learns") && ok;
    return ok;
  });
}

TEST_CASE("FSDP sharded GradScaler: an inf in one rank's shard skips the step on every rank") {
  ddptest::run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
    bool ok = true;
    for (bool sharded : {true, false}) {
      manual_seed(kSeed);
      auto model = std::make_shared<ptest::SmallNet>();
      auto fsdp = std::make_shared<FSDP>(model, pg, options({}, {}));
      optim::SGD opt(fsdp->parameters(), 0.1);
      amp::GradScalerOptions so;
      so.init_scale = 1024;
      so.warn_consecutive_skips = 0;
      amp::GradScaler scaler = sharded ? sharded_grad_scaler(so, pg) : amp::GradScaler(so);
      Tensor x = ptest::batch_x(rank, 8), y = ptest::batch_y(rank, 8);
      scaler.scale(cross_entropy((*fsdp)(x), y)).backward();
      if (rank == 1)  // an overflow only this rank's shard sees
        fsdp->units()[0]->flat_param.mutable_grad().narrow(0, 0, 1).fill_(
            std::numeric_limits<double>::infinity());
      std::vector<Tensor> before;
      for (const Tensor& s : fsdp->parameters()) before.push_back(s.detach().clone());
      const bool stepped = scaler.step(opt);
      scaler.update();
      bool unchanged = true;
      for (size_t i = 0; i < before.size(); ++i)
        unchanged = unchanged && equal(before[i], fsdp->parameters()[i].detach());
      if (sharded) {
        ok = report(rank, !stepped && unchanged, "every rank skips") && ok;
        ok = report(rank, scaler.get_scale() == 512, "every rank backs off the scale") && ok;
      } else {  // the plain scaler: rank 0 saw no inf and steps; the shards diverge
        ok = report(rank, stepped == (rank == 0), "a plain scaler decides per rank") && ok;
      }
    }
    return ok;
  });
}
