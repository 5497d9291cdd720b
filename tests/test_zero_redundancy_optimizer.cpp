// dist::ZeroRedundancyOptimizer (ZeRO stage 1) on 2 and 3 forked gloo ranks: 20 DDP steps equal
// the plain optimizer bitwise (Adam, AdamW with groups, SGD momentum), state bytes ~1/N per rank,
// parameters updated from their owners (state dicts: test_zero_state_dict.cpp),
// GradScaler skips agreed by every rank, AMP O2 masters, LR schedulers, and mismatch errors.
#include <doctest/doctest.h>

#include <cstring>
#include <iostream>

#include "ddp_test_util.h"
#include "dist_test_util.h"
#include "parallel/zero/zero_redundancy_optimizer.h"
#include "parallel_test_models.h"
#include "skip.h"
#include "zero_test_util.h"

#if MINIDL_WITH_GLOO  // the ranks talk through the gloo backend

using namespace minidl;
using namespace minidl::dist;
using namespace ddptest;
using namespace zerotest;
using disttest::contains;

TEST_SUITE("zero_redundancy_optimizer") {
  TEST_CASE("ZeRO: 20 DDP steps equal the plain optimizer bitwise (Adam, AdamW, SGD, 2-3 ranks)") {
    for (int world : {2, 3})
      for (Kind kind : {Kind::adam, Kind::adamw, Kind::sgd}) {
        INFO(world << " ranks, " << std::string(kind_name(kind)));
        run_ranks(world, [world, kind](int rank, std::shared_ptr<ProcessGroup> pg) {
          manual_seed(11);
          auto mz = std::make_shared<Mlp>();
          auto mp = clone_of(*mz);
          DistributedDataParallel dz(mz, pg), dp(mp, pg);
          auto zero = make_zero(kind, *mz, pg);
          auto plain = make_plain(kind, *mp);
          for (int s = 0; s < 20; ++s) {
            train_step(dz, *zero, s, rank, world);
            train_step(dp, *plain, s, rank, world);
          }
          const Tensor pz = flat(mz->parameters()), pp = flat(mp->parameters());
          shared_doubles()[rank] = max_abs_diff(pz, pp);
          bool ok = report(rank, bitwise_equal(pz, pp), "parameters bitwise equal the plain run's");
          ok = report(rank, same_on_all_ranks(*pg, pz), "parameters bitwise equal across ranks") &&
               ok;
          // Both groups of AdamW keep their own weight decay on every rank's local optimizer.
          if (kind == Kind::adamw)
            ok = report(rank,
                        zero->local_optimizer().param_groups().size() == 2 &&
                            zero->local_optimizer().param_groups()[1].get("weight_decay") == 0 &&
                            zero->param_groups()[0].get("weight_decay") == 0.1,
                        "group options") &&
                 ok;
          return ok;
        });
        for (int r = 0; r < world; ++r) CHECK(shared_doubles()[r] == 0.0);
        MESSAGE(world << " ranks " << std::string(kind_name(kind))
                      << ": max |ZeRO - plain| = " << shared_doubles()[0]);
      }
  }

  TEST_CASE("ZeRO: optimizer state bytes per rank are ~1/N of the plain optimizer's (1-3 ranks)") {
    for (int world : {1, 2, 3}) {
      INFO(world << " ranks");
      double* sh = shared_doubles();
      for (int k = 0; k < 16; ++k) sh[k] = -1;
      run_ranks(world, [world](int rank, std::shared_ptr<ProcessGroup> pg) {
        manual_seed(11);
        auto mz = std::make_shared<Mlp>();
        auto mp = clone_of(*mz);
        DistributedDataParallel dz(mz, pg), dp(mp, pg);
        ZeroRedundancyOptimizer zero(mz->parameters(), adam_factory(1e-2), pg);
        optim::Adam plain(mp->parameters(), 1e-2);
        train_step(dz, zero, 0, rank, world);
        train_step(dp, plain, 0, rank, world);
        const ZeroStats st = zero.stats();
        double* out = shared_doubles();
        out[rank] = double(st.state_bytes);
        out[4 + rank] = double(st.params_owned);
        out[8 + rank] = double(st.param_bytes_owned);
        if (rank == 0) {
          out[12] = double(optimizer_state_bytes(plain));
          double largest = 0;  // one parameter's Adam state: exp_avg, exp_avg_sq, step
          for (const Tensor& p : mp->parameters())
            largest = std::max(largest, double(2 * p.nbytes() + 8));
          out[13] = largest;
        }
        int owners = 0;
        for (int r = 0; r < world; ++r)
          for (size_t i = 0; i < 8; ++i)
            if (zero.owner(i) == r) {
              ++owners;
              break;
            }
        bool ok = report(rank, st.params_total == 8 && st.world_size == world, "totals");
        ok = report(rank,
                    world == 1 ? st.broadcast_bytes_per_step == 0
                               : st.broadcast_bytes_per_step == st.param_bytes_total &&
                                     st.broadcasts_per_step == owners,
                    "broadcast stats") &&
             ok;
        // World size 1: state_dict() needs no consolidation and is the plain optimizer's.
        if (world == 1)
          ok = report(rank, state_dict_diff(zero.state_dict(), plain.state_dict()) == 0,
                      "world-1 state_dict") &&
               ok;
        return ok;
      });
      const double plain = sh[12], largest = sh[13];
      double sum = 0, worst = 0, owned = 0;
      for (int r = 0; r < world; ++r) {
        sum += sh[r];
        worst = std::max(worst, sh[r]);
        owned += sh[4 + r];
        if (world > 1) CHECK(sh[r] < plain);  // fails without sharding
        MESSAGE(world << " ranks: rank " << r << " state " << sh[r] << " B, owns " << sh[4 + r]
                      << " params (" << sh[8 + r] << " B); plain optimizer state " << plain
                      << " B");
      }
      CHECK(sum == plain);
      CHECK(owned == 8);
      CHECK(worst <= plain / world + largest);
    }
  }

  TEST_CASE("ZeRO: every parameter is updated from its owner by one broadcast per owner") {
    run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
      manual_seed(11);
      auto m = std::make_shared<Mlp>();
      DistributedDataParallel ddp(m, pg);
      ZeroRedundancyOptimizer zero(m->parameters(), sgd_factory(0.05, 0.9), pg);
      bool ok = true;
      for (int s = 0; s < 3; ++s) {
        std::vector<Tensor> before;
        for (const Tensor& p : m->parameters()) before.push_back(p.detach().clone());
        zero.zero_grad();
        Tensor x = testutil::random_tensor({kRows, 16}, kFloat32, 3000 + uint64_t(s));
        Tensor y = testutil::random_tensor({kRows}, kInt64, 4000 + uint64_t(s), 0, 10);
        ptest::loss_of(ddp, x.narrow(0, rank * 6, 6), y.narrow(0, rank * 6, 6)).backward();
        const uint64_t c0 = pg->collective_counts().collectives;
        zero.step();
        const uint64_t issued = pg->collective_counts().collectives - c0;
        ok = report(rank, int64_t(issued) == zero.stats().broadcasts_per_step && issued == 2,
                    "one broadcast per owner rank") &&
             ok;
        const std::vector<Tensor> now = m->parameters();
        for (size_t i = 0; i < now.size(); ++i)  // rank 0 sees rank 1's parameters change
          ok = report(rank, !bitwise_equal(now[i], before[i]),
                      "parameter " + std::to_string(i) + " (owner " +
                          std::to_string(zero.owner(i)) + ") changed") &&
               ok;
        ok =
            report(rank, same_on_all_ranks(*pg, flat(m->parameters())), "equal across ranks") && ok;
      }
      // Only this rank's parameters have optimizer state.
      ok = report(rank, zero.stats().params_owned < 8 && zero.stats().params_owned > 0, "shard") &&
           ok;
      return ok;
    });
  }

  TEST_CASE("ZeRO: GradScaler skips on every rank when one rank's gradient is inf") {
    double* sh = shared_doubles();
    for (int k = 0; k < 16; ++k) sh[k] = -1;
    run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
      manual_seed(11);
      auto mz = std::make_shared<Mlp>();
      auto mp = clone_of(*mz);
      DistributedDataParallel dz(mz, pg), dp(mp, pg);
      ZeroRedundancyOptimizer zero(mz->parameters(), adam_factory(1e-2), pg);
      optim::Adam plain(mp->parameters(), 1e-2);
      amp::GradScaler scaler({.init_scale = 1024, .rank = rank}), pscaler({.init_scale = 1024});
      size_t of0 = 99, of1 = 99;  // a parameter owned by rank 0, one owned by rank 1
      for (size_t i = 8; i-- > 0;) (zero.owner(i) == 0 ? of0 : of1) = i;
      bool ok = true;
      // step 1: rank 1 poisons a parameter owned by rank 0; step 2: one it owns itself; step 3:
      // rank 0 poisons one owned by rank 1 with NaN. Steps 0 and 4 are clean.
      for (int s = 0; s < 5; ++s) {
        zero.zero_grad();
        Tensor x = testutil::random_tensor({kRows, 16}, kFloat32, 3000 + uint64_t(s));
        Tensor y = testutil::random_tensor({kRows}, kInt64, 4000 + uint64_t(s), 0, 10);
        scaler.scale(ptest::loss_of(dz, x.narrow(0, rank * 6, 6), y.narrow(0, rank * 6, 6)))
            .backward();
        std::vector<Tensor> params = mz->parameters();
        const int poison_rank = s == 3 ? 0 : 1;
        const size_t poison = s == 1 ? of0 : of1;
        const bool skip = s >= 1 && s <= 3;
        if (skip && rank == poison_rank) {
          NoGradGuard g;
          params[poison].mutable_grad().view({-1}).narrow(0, 0, 1).fill_(s == 3 ? NAN : INFINITY);
        }
        const Tensor before = flat(params).clone();
        const auto state_before = zero.local_state_dict();
        // Steps 3 and 4 unscale first (clip_grad_norm_): step_with_scaling gets no grad_scale.
        if (s >= 3) scaler.clip_grad_norm_(zero, 1e3);
        const bool applied = scaler.step(zero);
        scaler.update();
        const std::string at = "step " + std::to_string(s);
        ok = report(rank, applied == !skip, at + ": applied/skipped as expected") && ok;
        ok = report(rank, bitwise_equal(flat(params), before) == skip, at + ": params") && ok;
        if (skip)
          ok = report(rank, state_dict_diff(zero.local_state_dict(), state_before) == 0,
                      at + ": state unchanged") &&
               ok;
        ok = report(rank, same_on_all_ranks(*pg, flat(params)), at + ": equal across ranks") && ok;
        const Tensor scale = full({1}, scaler.get_scale(), kFloat64);
        ok = report(rank, same_on_all_ranks(*pg, scale), at + ": scale equal across ranks") && ok;
        shared_doubles()[rank * 8 + s] = scaler.get_scale();
        if (s == 0) {  // the clean first step equals DDP + Adam + its own GradScaler
          plain.zero_grad();
          pscaler.scale(ptest::loss_of(dp, x.narrow(0, rank * 6, 6), y.narrow(0, rank * 6, 6)))
              .backward();
          pscaler.step(plain);
          pscaler.update();
          ok = report(rank, bitwise_equal(flat(mz->parameters()), flat(mp->parameters())),
                      "first step equals the plain optimizer with GradScaler") &&
               ok;
        }
      }
      return ok;
    });
    const double expected[5] = {1024, 512, 256, 128, 128};
    for (int r = 0; r < 2; ++r)
      for (int s = 0; s < 5; ++s) CHECK(sh[r * 8 + s] == expected[s]);
  }

  TEST_CASE(
      "ZeRO: AMP O2 fp16 (replicated fp32 masters, sharded state) equals the plain optimizer") {
    run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
      manual_seed(12);
      auto mz = std::make_shared<Mlp>();
      auto mp = clone_of(*mz);
      ZeroRedundancyOptimizer zero(mz->parameters(), adam_factory(1e-2), pg);
      optim::Adam plain(mp->parameters(), 1e-2);
      auto az = amp::initialize(*mz, zero, "O2", kFloat16);  // before DDP: buckets in fp16
      auto ap = amp::initialize(*mp, plain, "O2", kFloat16);
      DistributedDataParallel dz(mz, pg), dp(mp, pg);
      bool ok = true;
      for (int s = 0; s < 6; ++s) {
        Tensor x = testutil::random_tensor({kRows, 16}, kFloat32, 3000 + uint64_t(s));
        Tensor y = testutil::random_tensor({kRows}, kInt64, 4000 + uint64_t(s), 0, 10);
        x = x.narrow(0, rank * 6, 6);
        y = y.narrow(0, rank * 6, 6);
        if (s == 2 && rank == 1) x = x * 1e30;  // inf in fp16 on rank 1 only: both runs skip
        zero.zero_grad();
        az->backward(nn::functional::cross_entropy(az->forward(dz, x), y));
        const bool applied = az->step();
        plain.zero_grad();
        ap->backward(nn::functional::cross_entropy(ap->forward(dp, x), y));
        ap->step();
        ok =
            report(rank, applied == (s != 2), "step " + std::to_string(s) + " skip decision") && ok;
      }
      ok = report(rank, bitwise_equal(flat(az->master_params()), flat(ap->master_params())),
                  "masters equal the plain run's") &&
           ok;
      ok = report(rank, bitwise_equal(flat(mz->parameters()), flat(mp->parameters())),
                  "fp16 parameters equal the plain run's") &&
           ok;
      ok =
          report(rank, same_on_all_ranks(*pg, flat(az->master_params())), "masters across ranks") &&
          ok;
      ok = report(rank, az->scaler().get_scale() == ap->scaler().get_scale(), "scales") && ok;
      return report(rank, zero.stats().state_bytes < optimizer_state_bytes(plain), "sharded") && ok;
    });
  }

  TEST_CASE("ZeRO: an LR scheduler on the wrapper drives the local steps") {
    run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
      manual_seed(11);
      auto mz = std::make_shared<Mlp>();
      auto mp = clone_of(*mz);
      DistributedDataParallel dz(mz, pg), dp(mp, pg);
      ZeroRedundancyOptimizer zero(mz->parameters(), sgd_factory(0.1, 0.9), pg);
      optim::SGD plain(mp->parameters(), 0.1, 0.9);
      optim::StepLR sz(zero, 2, 0.5), sp(plain, 2, 0.5);
      bool ok = true;
      for (int s = 0; s < 6; ++s) {
        train_step(dz, zero, s, rank, 2);
        train_step(dp, plain, s, rank, 2);
        ok = report(rank,
                    zero.local_optimizer().param_groups()[0].lr() == zero.param_groups()[0].lr(),
                    "local lr follows the wrapper's") &&
             ok;
        sz.step();
        sp.step();
      }
      ok = report(rank, zero.param_groups()[0].lr() == 0.1 * 0.125, "lr decayed") && ok;
      ok = report(rank, bitwise_equal(flat(mz->parameters()), flat(mp->parameters())),
                  "equal to the plain optimizer under the same schedule") &&
           ok;
      return ok;
    });
  }

  TEST_CASE("ZeRO: ranks with different parameters and mismatching state dicts are named") {
    run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
      bool ok = true;
      {  // rank 1's first layer is wider
        manual_seed(11);
        Mlp m(rank == 1 ? 24 : 32);
        std::string msg;
        try {
          ZeroRedundancyOptimizer zero(m.parameters(), adam_factory(), pg);
        } catch (const Error& e) {
          msg = e.what();
        }
        ok = report(rank,
                    contains(msg, "parameter 0 is [32, 16] float32") && contains(msg, "[24, 16]") &&
                        contains(msg, "on rank 1"),
                    "shape mismatch named: " + msg) &&
             ok;
      }
      {  // rank 1 passes one parameter less
        manual_seed(11);
        Mlp m;
        std::vector<Tensor> params = m.parameters();
        if (rank == 1) params.pop_back();
        std::string msg;
        try {
          ZeroRedundancyOptimizer zero(params, adam_factory(), pg);
        } catch (const Error& e) {
          msg = e.what();
        }
        ok = report(rank, contains(msg, "rank 0 has 8 parameters but rank 1 has 7"),
                    "count mismatch named: " + msg) &&
             ok;
      }
      manual_seed(11);
      auto m = std::make_shared<Mlp>();
      DistributedDataParallel ddp(m, pg);
      ZeroRedundancyOptimizer zero(m->parameters(), adam_factory(1e-2), pg);
      train_step(ddp, zero, 0, rank, 2);
      zero.consolidate_state_dict(0);
      // Every rank validates the whole dict (not only its shard) and names parameter and shapes.
      std::map<std::string, Tensor> sd = zero.local_state_dict();
      sd["state.1.exp_avg"] = zeros({3});
      std::string msg;
      try {
        zero.load_state_dict(sd);
      } catch (const Error& e) {
        msg = e.what();
      }
      ok = report(rank,
                  contains(msg, "`state.1.exp_avg` has shape [3] but parameter 1 has shape [32]") &&
                      contains(msg, "rank " + std::to_string(rank) + " of 2"),
                  "state shape mismatch named: " + msg) &&
           ok;
      sd = zero.local_state_dict();
      sd["param_groups.0.params"] = arange(int64_t(7), kInt64);
      msg.clear();
      try {
        zero.load_state_dict(sd);
      } catch (const Error& e) {
        msg = e.what();
      }
      ok = report(rank, contains(msg, "lists 7 parameter(s)") && contains(msg, "has 8"),
                  "parameter count mismatch named: " + msg) &&
           ok;
      // The failed loads changed nothing: training goes on in step on every rank.
      train_step(ddp, zero, 1, rank, 2);
      ok = report(rank, same_on_all_ranks(*pg, flat(m->parameters())), "still in step") && ok;
      return ok;
    });
  }

}  // TEST_SUITE

#else
TEST_CASE("ZeRO: the multi-rank cases need Gloo") {
  MINIDL_SKIP(testutil::kNoGloo);
}
#endif  // MINIDL_WITH_GLOO
