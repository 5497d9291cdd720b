// The Accelerator with fsdp (parallel/accelerator/accelerator.h): an optimizer built before
// prepare() is moved onto the shards, the loop written once trains like hand-written DDP (with
// accumulation: FSDP's no_sync around the backward), save_state writes a sharded checkpoint that
// load_state reads on 2, 3 and 1 ranks, and the misuses are one-line errors.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "dist_test_util.h"
#include "minidl.h"
#include "parallel/accelerator/accelerator.h"
#include "parallel/distributed.h"
#include "parallel/fsdp/optimizer_shards.h"
#include "tensor/safetensors.h"
#include "parallel_test_models.h"
#include "pg_test_util.h"

using namespace minidl;
using disttest::contains;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

#if MINIDL_WITH_GLOO
namespace {

constexpr uint64_t kSeed = 11;

std::shared_ptr<data::TensorDataset> make_dataset(int64_t n) {
  return std::make_shared<data::TensorDataset>(ptest::batch_x(0, n), ptest::batch_y(0, n));
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  Tensor d = abs(a.to(kFloat64) - b.to(kFloat64));
  const double scale = std::max(1e-6, max(abs(b.to(kFloat64))).item<double>());
  return max(d).item<double>() / scale;
}

// The environment of a rank started by a launcher, then fn's report (run over `world` ranks).
std::vector<pgtest::RankReport> run_launched(int world, const std::function<std::string(int)>& fn) {
  const std::string port = std::to_string(disttest::free_port());
  return pgtest::run_ranks(
      world,
      [&](int rank, std::shared_ptr<dist::Store>) -> std::string {
        ::setenv("MASTER_ADDR", "127.0.0.1", 1);
        ::setenv("MASTER_PORT", port.c_str(), 1);
        ::setenv("RANK", std::to_string(rank).c_str(), 1);
        ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
        ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
        ::setenv("LOCAL_WORLD_SIZE", std::to_string(world).c_str(), 1);
        set_num_threads(1);
        return fn(rank);
      },
      30000ms);
}

void check_reports(const std::vector<pgtest::RankReport>& reports) {
  for (size_t r = 0; r < reports.size(); ++r)
    CHECK_MESSAGE(reports[r].text == "OK", "rank ", r, ": ", reports[r].text);
}

AcceleratorOptions fsdp_options(const std::string& strategy, int64_t accum = 1) {
  AcceleratorOptions o{.mode = "auto", .grad_accum_steps = accum, .seed = kSeed, .threads = 1};
  o.fsdp = strategy;
  o.fsdp_auto_wrap_policy = dist::module_wrap_policy<nn::Linear>();  // fc; conv in the root
  o.verbose = false;
  return o;
}

// One epoch of the loop written once.
void train_epoch(Accelerator& acc, PreparedLoader& loader) {
  for (data::Example& b : loader) {
    acc.zero_grad();
    acc.backward(nn::functional::cross_entropy(acc.forward(b.data), b.target));
    acc.clip_grad_norm_(1.0);
    acc.step();
  }
}

}  // namespace

TEST_CASE("FSDP through the Accelerator trains like hand-written DDP, with accumulation") {
  for (const std::string strategy : {"full", "grad-op"}) {
    CAPTURE(strategy);
    check_reports(run_launched(2, [&](int rank) -> std::string {
      auto ds = make_dataset(40);
      Accelerator acc(fsdp_options(strategy, /*accum=*/2));
      if (acc.describe().find("fsdp " + strategy + ", 2 rank(s)") == std::string::npos)
        return "describe: " + acc.describe();
      manual_seed(kSeed);
      auto ref = std::make_shared<ptest::SmallNet>();
      manual_seed(kSeed);
      auto model = std::make_shared<ptest::SmallNet>();
      // By hand: DDP, the sampler's share, loss / 2, no_sync on the first of each pair.
      optim::AdamW ref_opt(ref->parameters(), 1e-2);
      {
        dist::DistributedDataParallel ddp(ref);
        auto sampler = std::make_shared<data::DistributedSampler>(40, 2, rank, true, kSeed);
        data::DataLoader loader(ds, {.batch_size = 4, .seed = kSeed}, sampler);
        for (int e = 1; e <= 2; ++e) {
          loader.start_epoch(e);
          data::Example b;
          for (int64_t i = 0; loader.next(b); ++i) {
            const bool last = i + 1 == loader.size();
            if (i % 2 == 0) ref_opt.zero_grad();
            if (i % 2 == 0 && !last) {
              auto guard = ddp.no_sync();
              div(nn::functional::cross_entropy(ddp(b.data), b.target), 2.0).backward();
              continue;
            }
            div(nn::functional::cross_entropy(ddp(b.data), b.target), 2.0).backward();
            optim::clip_grad_norm_(ref->parameters(), 1.0);
            ref_opt.step();
          }
        }
      }
      optim::AdamW opt(model->parameters(), 1e-2);  // over the model: prepare() re-points it
      acc.prepare(model, opt);
      dist::FullyShardedDataParallel* fsdp = acc.fsdp();
      if (fsdp == nullptr || acc.ddp() != nullptr) return "no FSDP wrapper";
      if (fsdp->units().size() != 2) return "units: " + std::to_string(fsdp->units().size());
      const std::vector<Tensor> shards = fsdp->parameters();
      if (opt.param_groups().size() != 1 || opt.param_groups()[0].params.size() != 2 ||
          !opt.param_groups()[0].params[0].is_same(shards[0]) ||
          !opt.param_groups()[0].params[1].is_same(shards[1]))
        return "the optimizer does not step the shards";
      auto loader = acc.prepare_data_loader(ds, {.batch_size = 4}, true);
      for (int e = 0; e < 2; ++e) train_epoch(acc, *loader);
      if (acc.optimizer_steps() != 6) return "steps " + std::to_string(acc.optimizer_steps());
      // 10 micro-batches, 6 windows: one reduce-scatter per unit per window.
      for (const auto& u : fsdp->units())
        if (u->reductions != 6) return "unit reductions " + std::to_string(u->reductions);
      const nn::StateDict got = fsdp->full_state_dict(), want = ref->state_dict();
      for (const auto& [name, t] : want) {
        const double d = max_rel_diff(got.at(name), t);
        if (d > 1e-5) return name + " differs from DDP's by " + std::to_string(d);
      }
      return "";
    }));
  }
}

TEST_CASE("FSDP Accelerator checkpoints: save on 2 ranks, resume on 2 bitwise, on 3 and on 1") {
  const fs::path dir =
      fs::temp_directory_path() / ("minidl_acc_fsdp_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string ckpt = (dir / "state.safetensors").string();
  const std::string after1 = (dir / "after1.safetensors").string();
  const std::string after2 = (dir / "after2.safetensors").string();
  auto ds = make_dataset(48);
  // A run on `world` ranks: resumes from ckpt or trains epoch 1 and saves; then trains epoch 2.
  auto run = [&](int world, bool resume) {
    return run_launched(world, [&, world, resume](int rank) -> std::string {
      Accelerator acc(fsdp_options("full"));
      manual_seed(resume ? 99 : kSeed);  // a resumed run starts from other weights
      auto model = std::make_shared<ptest::SmallNet>();
      optim::AdamW opt(model->parameters(), 1e-2);
      optim::StepLR sched(opt, 1, 0.5);
      acc.prepare(model, opt);
      acc.prepare_scheduler(sched);
      auto loader = acc.prepare_data_loader(ds, {.batch_size = 4}, true);
      if (resume) {
        auto meta = acc.load_state(ckpt);
        if (meta.at("note") != "epoch 1") return "meta note";
        if (loader->epoch() != 1) return "loader epoch " + std::to_string(loader->epoch());
        if (opt.param_groups()[0].lr() != 5e-3) return "scheduler not restored";
        const nn::StateDict now = acc.fsdp()->full_state_dict();
        for (const auto& [name, t] : load_safetensors(after1))
          if (!equal(now.at(name), t)) return "weights after load differ at " + name;
        if (opt.state(0).empty()) return "no optimizer state after load";
      } else {
        train_epoch(acc, *loader);
        sched.step();
        acc.save_state(ckpt, {{"note", "epoch 1"}});
        if (!fs::is_directory(ckpt + ".shards")) return "no shard directory";
        const nn::StateDict w = acc.fsdp()->full_state_dict();
        if (rank == 0) save_safetensors({w.begin(), w.end()}, after1);
      }
      train_epoch(acc, *loader);
      const nn::StateDict w = acc.fsdp()->full_state_dict();
      if (!resume && rank == 0) save_safetensors({w.begin(), w.end()}, after2);
      if (resume && world == 2)  // the same world: the continued run is the uninterrupted one
        for (const auto& [name, t] : load_safetensors(after2))
          if (!equal(w.at(name), t)) return "resumed run differs at " + name;
      for (const auto& [name, t] : w)
        if (!std::isfinite(sum(t.to(kFloat64)).item<double>())) return "non-finite " + name;
      acc.wait_for_everyone();
      return "";
    });
  };
  check_reports(run(2, false));
  check_reports(run(2, true));
  check_reports(run(3, true));
  check_reports(run(1, true));
  // A run without FSDP is told what the file is.
  check_reports(run_launched(2, [&](int) -> std::string {
    Accelerator acc({.mode = "auto", .seed = kSeed, .threads = 1});
    auto model = std::make_shared<ptest::SmallNet>();
    optim::AdamW opt(model->parameters(), 1e-2);
    acc.prepare(model, opt);
    auto err = disttest::expect_error([&] { acc.load_state(ckpt); });
    if (!contains(err.message, "was written by an FSDP run (full") ||
        !contains(err.message, "--fsdp full"))
      return "error: " + err.message;
    return "";
  }));
  fs::remove_all(dir);
}

TEST_CASE("FSDP Accelerator: misuse is a one-line error") {
  // Not distributed.
  CHECK(contains(
      disttest::expect_error([] { Accelerator acc({.mode = "single", .fsdp = "full"}); }).message,
      "fsdp full shards the model over processes and needs mode ddp"));
  CHECK(contains(
      disttest::expect_error([] { Accelerator acc({.mode = "single", .fsdp = "zero3"}); }).message,
      "fsdp must be off, full, grad-op or no-shard, got 'zero3'"));
  // One launched job per case: a process re-joining the same store port races its teardown.
  check_reports(run_launched(2, [&](int) -> std::string {
    {  // fp16 needs the sharded scaler the Accelerator does not run
      AcceleratorOptions o = fsdp_options("full");
      o.amp = "fp16";
      Accelerator acc(o);
      auto model = std::make_shared<ptest::SmallNet>();
      optim::SGD opt(model->parameters(), 0.1);
      auto err = disttest::expect_error([&] { acc.prepare(model, opt); });
      if (!contains(err.message, "FSDP runs AMP as bf16 autocast at O1 only"))
        return "amp error: " + err.message;
    }
    return "";
  }));
  check_reports(run_launched(2, [&](int) -> std::string {
    {  // a unit's parameters in two param groups
      Accelerator acc(fsdp_options("grad-op"));
      auto model = std::make_shared<ptest::SmallNet>();
      optim::SGD opt({optim::ParamGroup({model->fc->weight}),
                      optim::ParamGroup({model->fc->bias, model->conv->weight, model->conv->bias},
                                        {{"lr", 0.01}})},
                     0.1);
      auto err = disttest::expect_error([&] { acc.prepare(model, opt); });
      if (!contains(err.message, "unit 'fc' has parameters in param groups 0 and 1 ('fc.bias')"))
        return "groups error: " + err.message;
    }
    return "";
  }));
  check_reports(run_launched(2, [&](int) -> std::string {
    {  // part of a unit left out of the optimizer
      Accelerator acc(fsdp_options("full"));
      auto model = std::make_shared<ptest::SmallNet>();
      optim::SGD opt({model->fc->weight, model->conv->weight, model->conv->bias}, 0.1);
      auto err = disttest::expect_error([&] { acc.prepare(model, opt); });
      if (!contains(err.message, "holds 1 of the 2 parameters of unit 'fc' (not 'fc.bias [10]')"))
        return "partial error: " + err.message;
    }
    return "";
  }));
}
#else
TEST_CASE("FSDP Accelerator cases need Gloo") {
  MESSAGE("built without Gloo: the Accelerator's FSDP cases are not compiled");
}
#endif
