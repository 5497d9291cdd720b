// FSDP checkpoints on gloo ranks: a sharded checkpoint of 2 ranks resumes bitwise on 2, loads
// on 3 and then on 1 with the same whole parameters and optimizer state, and a plain model's
// full state dict loads into the shards; broken checkpoints are refused with their file named.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "ddp_test_util.h"
#include "minidl.h"
#include "parallel/fsdp/checkpoint.h"
#include "test_util.h"

using namespace minidl;
using namespace minidl::dist;
using ddptest::report;

namespace {
struct Block : nn::Cloneable<Block> {
  std::shared_ptr<nn::Linear> fc1 = std::make_shared<nn::Linear>(12, 29);
  std::shared_ptr<nn::Linear> fc2 = std::make_shared<nn::Linear>(29, 12);
  Block() {
    register_module("fc1", &fc1);
    register_module("fc2", &fc2);
  }
  Tensor forward(const Tensor& x) override { return x + (*fc2)(relu((*fc1)(x))); }
};
struct Net : nn::Cloneable<Net> {
  std::shared_ptr<Block> b0 = std::make_shared<Block>(), b1 = std::make_shared<Block>();
  std::shared_ptr<nn::Linear> head = std::make_shared<nn::Linear>(12, 3);
  Net() {
    register_module("b0", &b0);
    register_module("b1", &b1);
    register_module("head", &head);
  }
  Tensor forward(const Tensor& x) override { return (*head)((*b1)((*b0)(x))); }
};

struct Run {
  std::shared_ptr<FSDP> fsdp;
  std::unique_ptr<optim::AdamW> opt;
};
Run make_run(std::shared_ptr<ProcessGroup> pg, uint64_t seed) {
  manual_seed(seed);
  Run r;
  r.fsdp = std::make_shared<FSDP>(std::make_shared<Net>(), pg,
                                  FSDPOptions{.auto_wrap_policy = module_wrap_policy<Block>()});
  r.opt = std::make_unique<optim::AdamW>(r.fsdp->parameters(), 1e-2);
  return r;
}

// One step on data that depends only on (step, rank); returns the loss.
double train_step(Run& r, int rank, int step) {
  Tensor x = testutil::random_tensor({4, 12}, kFloat32, uint64_t(100 * step + rank));
  r.opt->zero_grad();
  Tensor loss = sum(square((*r.fsdp)(x)));
  loss.backward();
  r.opt->step();
  return loss.item<double>();
}

// The whole optimizer state ("<unit>.exp_avg", ...) gathered over the ranks.
nn::StateDict full_optimizer_state(Run& r) {
  nn::StateDict out;
  ProcessGroup& pg = r.fsdp->process_group();
  for (size_t i = 0; i < r.fsdp->units().size(); ++i) {
    const auto& u = r.fsdp->units()[i];
    for (const auto& [key, t] : r.opt->state(i)) {
      if (t.dim() != 1) {
        out[std::to_string(i) + "." + key] = t.clone();
        continue;
      }
      std::vector<Tensor> parts;
      for (int q = 0; q < pg.size(); ++q) parts.push_back(empty(t.shape(), t.dtype()));
      pg.allgather(parts, t)->wait();
      out[std::to_string(i) + "." + key] = cat(parts, 0).narrow(0, 0, u->numel()).clone();
    }
  }
  return out;
}

bool same(int rank, const nn::StateDict& a, const nn::StateDict& b, const std::string& what) {
  bool ok = report(rank, a.size() == b.size(), what + ": key counts differ");
  for (const auto& [k, t] : a) {
    auto it = b.find(k);
    ok = report(rank, it != b.end() && testutil::bitwise_equal(t, it->second), what + ": " + k) &&
         ok;
  }
  return ok;
}

std::string temp_dir() {
  char tmpl[] = "/tmp/minidl_fsdp_ckpt_XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  return tmpl;
}
}  // namespace

TEST_CASE("FSDP sharded checkpoint: resume bitwise on 2 ranks, reshard to 3 and to 1") {
  const std::string dir = temp_dir();
  // 2 ranks: 3 steps, save, 3 more steps; the references are written by rank 0.
  ddptest::run_ranks(2, [&](int rank, std::shared_ptr<ProcessGroup> pg) {
    Run r = make_run(pg, 1);
    for (int s = 0; s < 3; ++s) train_step(r, rank, s);
    save_sharded_checkpoint(dir + "/two", *r.fsdp, r.opt.get());
    const nn::StateDict params = r.fsdp->full_state_dict();
    const nn::StateDict state = full_optimizer_state(r);
    std::vector<double> losses;
    for (int s = 3; s < 6; ++s) losses.push_back(train_step(r, rank, s));
    if (rank == 0) {
      save_safetensors(params, dir + "/params.safetensors");
      save_safetensors(state, dir + "/state.safetensors");
    }
    // Resumed from the file by a model initialised differently: the same losses, bitwise.
    Run b = make_run(pg, 99);
    load_sharded_checkpoint(dir + "/two", *b.fsdp, b.opt.get());
    bool ok = true;
    for (int s = 3; s < 6; ++s)
      ok = report(rank, train_step(b, rank, s) == losses[size_t(s - 3)], "resumed loss") && ok;
    return ok;
  });
  // 3 ranks, then 1: the whole parameters and optimizer state are the saved ones.
  for (int world : {3, 1}) {
    CAPTURE(world);
    ddptest::run_ranks(world, [&](int rank, std::shared_ptr<ProcessGroup> pg) {
      Run r = make_run(pg, 7);
      load_sharded_checkpoint(dir + (world == 3 ? "/two" : "/three"), *r.fsdp, r.opt.get());
      bool ok = same(rank, r.fsdp->full_state_dict(), load_safetensors(dir + "/params.safetensors"),
                     "parameters");
      ok = same(rank, full_optimizer_state(r), load_safetensors(dir + "/state.safetensors"),
                "optimizer state") &&
           ok;
      if (world == 3) save_sharded_checkpoint(dir + "/three", *r.fsdp, r.opt.get());
      train_step(r, rank, 6);  // and it trains on
      return ok;
    });
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("FSDP: a plain model's state dict loads into the shards, broken checkpoints are named") {
  const std::string dir = temp_dir();
  ddptest::run_ranks(2, [&](int rank, std::shared_ptr<ProcessGroup> pg) {
    manual_seed(5);
    auto plain = std::make_shared<Net>();
    Run r = make_run(pg, 6);
    load_full_state_dict(*r.fsdp, plain->state_dict());
    Tensor x = testutil::random_tensor({4, 12}, kFloat32, 3);
    bool ok;
    {
      NoGradGuard ng;
      ok = report(rank, testutil::bitwise_equal((*r.fsdp)(x), (*plain)(x)), "same outputs");
    }
    nn::StateDict bad = plain->state_dict();
    bad.erase("b1.fc2.bias");
    try {
      load_full_state_dict(*r.fsdp, bad);
      ok = report(rank, false, "a missing key was accepted") && ok;
    } catch (const Error& e) {
      ok =
          report(rank, std::string(e.what()).find("missing key 'b1.fc2.bias'") != std::string::npos,
                 e.what()) &&
          ok;
    }
    save_sharded_checkpoint(dir + "/ck", *r.fsdp, r.opt.get());
    if (rank == 0) std::filesystem::remove(dir + "/ck/shard-1-of-2.safetensors");
    pg->barrier()->wait();
    try {
      load_sharded_checkpoint(dir + "/ck", *r.fsdp, r.opt.get());
      ok = report(rank, false, "an incomplete checkpoint was accepted") && ok;
    } catch (const Error& e) {
      ok = report(rank,
                  std::string(e.what()).find("shard-1-of-2.safetensors is missing") !=
                      std::string::npos,
                  e.what()) &&
           ok;
    }
    return ok;
  });
  std::filesystem::remove_all(dir);
}
