// DDP communication and state sync over gloo, ranks in forked processes: coalesced buffer and
// parameter broadcasts (collectives counted per step), comm hooks (allreduce bitwise equal to
// the default, fp16/bf16 compression within half-precision tolerance at half the bytes,
// PowerSGD: plain before its start, exact on low-rank gradients, fewer bytes, error feedback).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "ddp_test_util.h"
#include "parallel/ddp/broadcast_coalesced.h"
#include "parallel/ddp/comm_hooks.h"
#include "parallel/ddp/ddp.h"
#include "parallel_test_models.h"

#if MINIDL_WITH_GLOO

using namespace minidl;
using namespace minidl::dist;
using namespace ptest;
using namespace ddptest;

namespace {

// x:[B,8] -> five (Linear 8x8 -> BatchNorm1d) blocks -> [B,8]: 15 BatchNorm buffers.
class BnStack : public nn::Cloneable<BnStack> {
 public:
  BnStack() {
    for (int i = 0; i < 5; ++i) {
      fcs.push_back(std::make_shared<nn::Linear>(8, 8));
      bns.push_back(std::make_shared<nn::BatchNorm1d>(8));
    }
    for (size_t i = 0; i < 5; ++i) {  // add_module: vector elements cannot be slots
      add_module("fc" + std::to_string(i), fcs[i]);
      add_module("bn" + std::to_string(i), bns[i]);
    }
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (size_t i = 0; i < fcs.size(); ++i) h = relu(bns[i]->forward(fcs[i]->forward(h)));
    return h;
  }
  std::string name() const override { return "BnStack"; }
  std::vector<std::shared_ptr<nn::Linear>> fcs;
  std::vector<std::shared_ptr<nn::BatchNorm1d>> bns;
};

// x:[B,16] -> Linear(16, 8, no bias) -> [B,8]: one [8,16] weight.
class OneMatrix : public nn::Cloneable<OneMatrix> {
 public:
  OneMatrix() {
    fc = std::make_shared<nn::Linear>(16, 8, false);
    register_module("fc", &fc);
  }
  Tensor forward(const Tensor& x) override { return fc->forward(x); }
  std::string name() const override { return "OneMatrix"; }
  std::shared_ptr<nn::Linear> fc;
};

double max_abs(const Tensor& t) {
  return max(abs(t)).item<double>();
}

// The gradients of `steps` DDP steps (SmallNet, per-rank data, SGD) with `hook` (or none),
// flattened per step; also the last step's DDPStats.
struct HookRun {
  std::vector<Tensor> grads;
  DDPStats stats;
};
HookRun run_hook(int rank, std::shared_ptr<ProcessGroup> pg, const CommHook& hook, int steps,
                 const std::string& which = "small") {
  manual_seed(7);
  std::shared_ptr<nn::Module> model;
  if (which == "small")
    model = std::make_shared<SmallNet>();
  else
    model = std::make_shared<OneMatrix>();
  DistributedDataParallel ddp(model, pg);
  if (hook) ddp.register_comm_hook(hook);
  HookRun out;
  for (int s = 0; s < steps; ++s) {
    Tensor loss;
    if (which == "small") {
      Tensor x = batch_x(s * 2 + rank, 4), y = batch_y(s * 2 + rank, 4);
      loss = loss_of(ddp, x, y);
    } else {  // one sample per rank: a rank-1 local gradient, rank <= world for the mean
      Tensor x = testutil::random_tensor({1, 16}, kFloat32, 50 + uint64_t(s * 2 + rank));
      loss =
          sum(mul(ddp.forward(x), testutil::random_tensor({1, 8}, kFloat32, 90 + uint64_t(rank))));
    }
    loss.backward();
    out.grads.push_back(flat([&] {
      std::vector<Tensor> g;
      for (auto& p : model->parameters()) g.push_back(p.grad());
      return g;
    }()));
    sgd_step(ddp);
  }
  out.stats = ddp.stats();
  return out;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.data_ptr(), b.data_ptr(), size_t(a.nbytes())) == 0;
}

}  // namespace

TEST_SUITE("ddp_comm") {
  TEST_CASE("DDP broadcasts buffers coalesced: two collectives per forward for 15 buffers") {
    run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
      manual_seed(3 + uint64_t(rank));  // different initial weights: construction syncs them
      auto model = std::make_shared<BnStack>();
      const uint64_t before = pg->sequence_number();
      DistributedDataParallel ddp(model, pg);
      // 2 allgathers (model check) + 1 broadcast (instance id) + 2 (f32 and i64 state).
      const uint64_t construction = pg->sequence_number() - before;
      bool ok = report(rank, construction == 5,
                       "construction collectives " + std::to_string(construction));
      ok = report(rank, same_on_all_ranks(*pg, flat_state(*model)), "state synced") && ok;
      {
        NoGradGuard no_grad;  // rank 1's buffers drift: the next forward restores rank 0's
        if (rank == 1)
          for (auto& b : model->buffers()) b.fill_(b.dtype() == kInt64 ? 7.0 : 0.5);
      }
      NoGradGuard no_grad;  // no synchronised backward: only the buffer broadcast talks
      for (int s = 0; s < 3; ++s) {
        const uint64_t seq0 = pg->sequence_number();
        ddp.forward(testutil::random_tensor({4, 8}, kFloat32, 11 + uint64_t(s)));
        const uint64_t n = pg->sequence_number() - seq0;
        ok = report(rank, n == 2, "collectives per forward " + std::to_string(n)) && ok;
      }
      ok = report(rank, same_on_all_ranks(*pg, flat(model->buffers())), "buffers equal") && ok;
      ok = report(rank, ddp.stats().buffer_broadcasts == 6, "buffer_broadcasts counted") && ok;
      return ok;
    });
  }

  TEST_CASE("broadcast_coalesced: mixed dtypes, bucket cap, non-contiguous tensors") {
    run_ranks(3, [](int rank, std::shared_ptr<ProcessGroup> pg) {
      std::vector<Tensor> ts;
      for (int i = 0; i < 6; ++i)
        ts.push_back(full({3, 2}, double(rank * 10 + i), i % 2 ? kFloat32 : kInt64));
      Tensor base = full({4, 4}, double(rank), kFloat64);
      ts.push_back(base.t());  // non-contiguous view
      const int issued = broadcast_coalesced(*pg, ts, 1, /*bucket_bytes=*/48);
      bool ok = true;
      for (int i = 0; i < 6; ++i)
        ok = report(rank, sum(ts[size_t(i)].to(kFloat64)).item<double>() == 6.0 * (10 + i),
                    "tensor " + std::to_string(i) + " is root's") &&
             ok;
      ok = report(rank, sum(base).item<double>() == 16.0, "view written through") && ok;
      // Cap 48 B: the i64 tensors (48 B each) one bucket each, the f32 ones (24 B) 48 + 24,
      // the f64 view (128 B, over the cap alone) one.
      ok = report(rank, issued == 6, "issued " + std::to_string(issued)) && ok;
      return ok;
    });
  }

  TEST_CASE("allreduce_hook is bitwise the default reduction") {
    run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
      HookRun plain = run_hook(rank, pg, nullptr, 3);
      HookRun hooked = run_hook(rank, pg, allreduce_hook(), 3);
      bool ok = true;
      for (size_t s = 0; s < plain.grads.size(); ++s)
        ok = report(rank, bitwise_equal(plain.grads[s], hooked.grads[s]), "step grads") && ok;
      ok = report(rank, plain.stats.bytes_per_step == hooked.stats.bytes_per_step, "bytes") && ok;
      return ok;
    });
  }

  TEST_CASE("fp16 and bf16 compression: half the bytes, half-precision accuracy") {
    run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
      HookRun plain = run_hook(rank, pg, nullptr, 2);
      bool ok = true;
      for (auto [name, hook, tol] : {std::tuple{"fp16", fp16_compress_hook(), 2e-3},
                                     std::tuple{"bf16", bf16_compress_hook(), 1.6e-2}}) {
        HookRun h = run_hook(rank, pg, hook, 2);
        for (size_t s = 0; s < h.grads.size(); ++s) {
          const double err = max_abs(sub(h.grads[s], plain.grads[s])) / max_abs(plain.grads[s]);
          ok = report(rank, err <= tol && err > 0,
                      std::string(name) + " error " + std::to_string(err)) &&
               ok;
        }
        ok = report(rank, 2 * h.stats.bytes_per_step == plain.stats.bytes_per_step,
                    std::string(name) + " bytes " + std::to_string(h.stats.bytes_per_step) +
                        " vs " + std::to_string(plain.stats.bytes_per_step)) &&
             ok;
      }
      return ok;
    });
  }

  TEST_CASE("PowerSGD: plain before start_powerSGD_iter, then exact on low rank, fewer bytes") {
    run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
      HookRun plain = run_hook(rank, pg, nullptr, 5, "matrix");
      PowerSGDOptions o{.matrix_approximation_rank = 2, .start_powerSGD_iter = 3};
      HookRun psgd = run_hook(rank, pg, powersgd_hook(o), 5, "matrix");
      bool ok = true;
      for (size_t s = 0; s < 3; ++s)
        ok = report(rank, bitwise_equal(plain.grads[s], psgd.grads[s]), "plain phase") && ok;
      // Steps 3, 4: the mean of two rank-1 gradients has rank <= 2 = R: P spans its columns,
      // so P P^T M = M up to rounding (and the error feedback stays ~0).
      for (size_t s = 3; s < 5; ++s) {
        const double err = max_abs(sub(psgd.grads[s], plain.grads[s])) / max_abs(plain.grads[s]);
        ok = report(rank, err < 1e-4, "compressed step error " + std::to_string(err)) && ok;
      }
      // [8,16] at rank 2: P 8x2 + Q 16x2 = 48 floats instead of 128.
      ok =
          report(rank, psgd.stats.bytes_per_step == 48 * 4 && plain.stats.bytes_per_step == 128 * 4,
                 "bytes " + std::to_string(psgd.stats.bytes_per_step)) &&
          ok;
      return ok;
    });
  }

  TEST_CASE("PowerSGD error feedback: the applied updates average to the true gradient") {
    // The same full-rank gradient every step, compressed to rank 1: without error feedback
    // every step applies the rank-1 truncation; with it the dropped part is sent later, so the
    // mean of the applied updates approaches the gradient.
    run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
      const Tensor m = testutil::random_tensor({8, 16}, kFloat32, 300 + uint64_t(rank));
      Tensor mean_m = m.clone();
      pg->allreduce(mean_m, ReduceOp::avg)->wait();
      std::vector<double> errs;
      for (bool feedback : {true, false}) {
        CommHook hook = powersgd_hook({.matrix_approximation_rank = 1,
                                       .start_powerSGD_iter = 2,
                                       .use_error_feedback = feedback});
        Tensor param = zeros({8, 16});
        Tensor applied = zeros({8, 16});
        const int steps = 200;
        for (int s = 0; s < steps; ++s) {
          Tensor buffer = m.clone().reshape({-1});
          GradBucket bucket(0, true, buffer, {param}, {0}, *pg);
          Tensor out = hook(bucket).wait();
          if (s >= 2) add_(applied, out.view({8, 16}));
        }
        mul_(applied, 1.0 / (steps - 2));
        errs.push_back(max_abs(sub(applied, mean_m)) / max_abs(mean_m));
      }
      if (rank == 0) {
        shared_doubles()[0] = errs[0];
        shared_doubles()[1] = errs[1];
      }
      bool ok = report(rank, errs[0] < 0.05, "with feedback " + std::to_string(errs[0]));
      ok = report(rank, errs[1] > 3 * errs[0], "without " + std::to_string(errs[1])) && ok;
      return ok;
    });
    MESSAGE("PowerSGD rank 1, 200 steps: mean applied update vs the gradient: ",
            shared_doubles()[0], " with error feedback, ", shared_doubles()[1], " without");
  }

  TEST_CASE("a user-written hook: avg allreduce into a new tensor, the default's result") {
    run_ranks(3, [](int rank, std::shared_ptr<ProcessGroup> pg) {
      HookRun plain = run_hook(rank, pg, nullptr, 2);
      int calls = 0;
      CommHook mine = [&calls](GradBucket& bucket) {
        ++calls;
        Tensor out = bucket.buffer().clone();  // undivided: this hook averages itself
        return CommFuture(bucket.process_group().allreduce(out, ReduceOp::avg), out);
      };
      HookRun h = run_hook(rank, pg, mine, 2);
      bool ok = report(rank, calls >= 2, "hook called");
      for (size_t s = 0; s < h.grads.size(); ++s) {
        const double err = max_abs(sub(h.grads[s], plain.grads[s])) / max_abs(plain.grads[s]);
        ok = report(rank, err <= 1e-6, "error " + std::to_string(err)) && ok;
      }
      return ok;
    });
  }

  TEST_CASE("Join with a comm hook: joined ranks run the hook on zeros, training finishes") {
    run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
      for (const char* spec : {"bf16", "powersgd:1:2"}) {
        manual_seed(11);
        auto model = std::make_shared<SmallNet>();
        DistributedDataParallel ddp(model, pg);
        ddp.register_comm_hook(make_comm_hook(spec));
        const int my_steps = rank == 0 ? 3 : 6;
        Join join(ddp);
        for (int s = 0; s < my_steps; ++s) {
          loss_of(ddp, batch_x(s * 2 + rank, 4), batch_y(s * 2 + rank, 4)).backward();
          sgd_step(ddp);
        }
        join.join();
        if (!report(rank, same_on_all_ranks(*pg, flat(model->parameters())),
                    std::string(spec) + ": params equal after join"))
          return false;
      }
      return true;
    });
  }

  TEST_CASE("comm hook errors: bad specs, a second hook") {
    CHECK_THROWS_WITH_AS(make_comm_hook("powersgd:0"), doctest::Contains("positive integer"),
                         Error);
    CHECK_THROWS_WITH_AS(make_comm_hook("int8"), doctest::Contains("unknown comm hook 'int8'"),
                         Error);
    CHECK_THROWS_WITH_AS(powersgd_hook({.start_powerSGD_iter = 1}),
                         doctest::Contains("start_powerSGD_iter must be >= 2"), Error);
    CHECK_NOTHROW(make_comm_hook("powersgd:4:100"));
    run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
      DistributedDataParallel ddp(std::make_shared<SmallNet>(), pg);
      ddp.register_comm_hook(fp16_compress_hook());
      try {
        ddp.register_comm_hook(bf16_compress_hook());
      } catch (const Error& e) {
        return report(rank, std::string(e.what()).find("already registered") != std::string::npos,
                      e.what());
      }
      return report(rank, false, "second hook accepted");
    });
  }
}

#endif  // MINIDL_WITH_GLOO
