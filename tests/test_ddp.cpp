// DistributedDataParallel over the gloo backend, ranks in forked processes: 2- and 3-rank
// training equals single-process training on the global batch and is bitwise equal across
// ranks (also with gradient_as_bucket_view), BatchNorm buffers follow rank 0, no_sync
// accumulation, unused parameters (named error; find_unused_parameters, also rank-divergent),
// uneven inputs (Join finishes; without it an error naming the ranks' step counts, no hang;
// published step counts and their cost), world size 1, model mismatches named, bucket layout
// and rebuild.
#include <doctest/doctest.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <thread>

#include "ddp_test_util.h"
#include "dist_test_util.h"
#include "parallel/ddp/ddp.h"
#include "parallel/store/tcp_store.h"
#include "parallel_test_models.h"
#include "skip.h"

#if MINIDL_WITH_GLOO  // the ranks talk through the gloo backend

using namespace minidl;
using namespace minidl::dist;
using namespace ptest;
using namespace ddptest;
using namespace std::chrono_literals;
using disttest::contains;

namespace {

// Reference for one DDP step on one process: rank r's gradient on its slice, averaged over
// ranks; BatchNorm buffers end as rank `last`'s (the others run first, their updates undone).
void reference_step(nn::Module& ref, const Tensor& x, const Tensor& y, int world,
                    const std::function<void(nn::Module&, int)>& per_rank = {}, int last = 0) {
  const int64_t per = x.size(0) / world;
  auto buffers = ref.buffers();
  std::vector<Tensor> saved;
  for (auto& b : buffers) saved.push_back(b.clone());
  for (int k = 1; k <= world; ++k) {
    const int r = (last + k) % world;  // last + 1, ..., last
    for (size_t j = 0; j < buffers.size(); ++j) buffers[j].copy_(saved[j]);
    if (per_rank) per_rank(ref, r);
    Tensor loss = loss_of(ref, x.narrow(0, r * per, per), y.narrow(0, r * per, per));
    mul(loss, 1.0 / world).backward();
  }
  sgd_step(ref);
}

// 10 steps of DDP training with per-rank slices of a global batch of 12, from per-rank seeds.
void train_equivalence(int world, bool bucket_view) {
  run_ranks(world, [world, bucket_view](int rank, std::shared_ptr<ProcessGroup> pg) {
    manual_seed(100);
    auto ref = std::make_shared<SmallNet>(true);  // = rank 0's initial model
    manual_seed(100 + uint64_t(rank));
    auto model = std::make_shared<SmallNet>(true);
    DDPOptions opts{.bucket_cap_mb = 0.002, .first_bucket_mb = 0.0005};
    opts.gradient_as_bucket_view = bucket_view;
    DistributedDataParallel ddp(model, pg, opts);
    bool ok = report(rank, ddp.bucket_indices().size() >= 2, "several buckets");
    const int64_t rows = 12, per = rows / world;
    for (int s = 0; s < 10; ++s) {
      Tensor x = batch_x(s, rows), y = batch_y(s, rows);
      loss_of(ddp, x.narrow(0, rank * per, per), y.narrow(0, rank * per, per)).backward();
      sgd_step(ddp);
      reference_step(*ref, x, y, world);
    }
    ok = report(rank, same_on_all_ranks(*pg, flat(model->parameters())), "params bitwise equal") &&
         ok;
    ok = report(rank, !same_on_all_ranks(*pg, flat(model->buffers())), "buffers differ") && ok;
    const ReducerStats& st = ddp.reducer_stats();
    ok = report(rank, st.comm_seconds > 0 && st.exposed_seconds <= st.comm_seconds, "stats") && ok;
    // Each rank's BatchNorm saw its own slice last; the next forward re-broadcasts rank 0's.
    ddp.eval();
    NoGradGuard no_grad;
    ddp.forward(batch_x(0, 2));
    const double err = max_rel_diff(model->state_dict(), ref->state_dict());
    if (rank == 0) shared_doubles()[0] = err;
    ok = report(rank, err <= 1e-5, "weights and buffers match the reference") && ok;
    return report(rank, same_on_all_ranks(*pg, flat_state(*model)), "buffers bitwise equal") && ok;
  });
}

}  // namespace

TEST_CASE("ddp: 2 ranks train like one process on the global batch") {
  train_equivalence(2, false);
  MESSAGE("DDP 2 ranks, 10 steps: max rel error vs single process " << shared_doubles()[0]);
}

TEST_CASE("ddp: 3 ranks with gradient_as_bucket_view") {
  train_equivalence(3, true);
  MESSAGE("DDP 3 ranks (bucket views), 10 steps: max rel error " << shared_doubles()[0]);
}

TEST_CASE("ddp: no_sync accumulation equals one big batch") {
  run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
    manual_seed(5);
    auto model = std::make_shared<SmallNet>();
    auto ref = model->clone();
    DistributedDataParallel ddp(model, pg);
    bool ok = true;
    for (int s = 0; s < 2; ++s) {
      Tensor x = batch_x(s, 16), y = batch_y(s, 16);  // 2 ranks x 4 micro-batches x 2 rows
      for (int m = 0; m < 4; ++m) {
        const int64_t start = (rank * 4 + m) * 2;
        auto step = [&] {
          mul(loss_of(ddp, x.narrow(0, start, 2), y.narrow(0, start, 2)), 0.25).backward();
        };
        if (m < 3) {
          auto guard = ddp.no_sync();
          step();
        } else {
          ok = report(rank, !same_on_all_ranks(*pg, model->fc->weight.grad()),
                      "local grads differ inside no_sync") &&
               ok;
          step();
        }
      }
      sgd_step(ddp);
      loss_of(*ref, x, y).backward();
      sgd_step(*ref);
    }
    const double err = max_rel_diff(model->state_dict(), ref->state_dict());
    if (rank == 0) shared_doubles()[1] = err;
    return report(rank, err <= 1e-5, "no_sync result matches the big batch") && ok;
  });
  MESSAGE("no_sync x3 + sync vs one big batch: max rel error " << shared_doubles()[1]);
}

TEST_CASE("ddp: an unused parameter is named at the next forward") {
  run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
    DistributedDataParallel ddp(std::make_shared<SmallNet>(false, /*unused_fc3=*/true), pg);
    loss_of(ddp, batch_x(0, 4), batch_y(0, 4)).backward();
    try {
      ddp.forward(batch_x(1, 4));
    } catch (const Error& e) {
      std::string msg = e.what();
      return report(rank,
                    contains(msg, "fc3.weight, fc3.bias") &&
                        contains(msg, "rank " + std::to_string(rank)) &&
                        contains(msg, "find_unused_parameters") && !contains(msg, "fc.weight"),
                    "message: " + msg);
    }
    return report(rank, false, "no error for an unused parameter");
  });
}

TEST_CASE("ddp: find_unused_parameters, also with a rank-dependent unused set") {
  run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
    manual_seed(9);
    auto model = std::make_shared<SmallNet>(false, true, /*use_fc3=*/rank == 0);
    auto ref = std::make_shared<SmallNet>(false, true, false);
    ref->load_state_dict(model->state_dict());
    DistributedDataParallel ddp(model, pg, {.find_unused_parameters = true});
    for (int s = 0; s < 3; ++s) {
      Tensor x = batch_x(s, 8), y = batch_y(s, 8);
      loss_of(ddp, x.narrow(0, rank * 4, 4), y.narrow(0, rank * 4, 4)).backward();
      sgd_step(ddp);
      reference_step(*ref, x, y, 2, [](nn::Module& m, int r) {
        static_cast<SmallNet&>(m).use_fc3_ = r == 0;  // only rank 0 uses fc3
      });
    }
    const double err = max_rel_diff(model->state_dict(), ref->state_dict());
    if (rank == 0) shared_doubles()[2] = err;
    bool ok = report(rank, err <= 1e-5, "matches the reference") &&
              report(rank, same_on_all_ranks(*pg, flat_state(*model)), "bitwise equal");
    // Unused on every rank: its .grad stays untouched (undefined), the others are reduced.
    auto unused = std::make_shared<SmallNet>(false, true, false);
    DistributedDataParallel ddp2(unused, pg, {.find_unused_parameters = true});
    loss_of(ddp2, batch_x(0, 4), batch_y(0, 4)).backward();
    return report(rank,
                  !unused->fc3->weight.grad().defined() && unused->fc->weight.grad().defined(),
                  "a parameter unused everywhere keeps no gradient") &&
           ok;
  });
  MESSAGE("find_unused_parameters (fc3 used on rank 0 only): max rel error "
          << shared_doubles()[2]);
}

TEST_CASE("ddp: uneven inputs finish under Join") {
  run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
    manual_seed(11);
    auto model = std::make_shared<SmallNet>(/*batch_norm=*/true);
    auto ref = model->clone();
    DistributedDataParallel ddp(model, pg);
    const int my_steps = rank == 0 ? 3 : 5;  // rank 0 joins first: buffers then come from 1
    {
      Join join(ddp);
      for (int s = 0; s < my_steps; ++s) {
        Tensor x = batch_x(s, 8), y = batch_y(s, 8);
        loss_of(ddp, x.narrow(0, rank * 4, 4), y.narrow(0, rank * 4, 4)).backward();
        sgd_step(ddp);
      }
      join.join();  // afterwards every rank holds rank 1's parameters and buffers
    }
    for (int s = 0; s < 5; ++s) {  // steps 3, 4: rank 1's gradient / world size
      Tensor x = batch_x(s, 8), y = batch_y(s, 8);
      if (s < 3) {
        reference_step(*ref, x, y, 2, {}, /*last=*/s == 2 ? 1 : 0);
      } else {
        mul(loss_of(*ref, x.narrow(0, 4, 4), y.narrow(0, 4, 4)), 0.5).backward();
        sgd_step(*ref);
      }
    }
    const double err = max_rel_diff(model->state_dict(), ref->state_dict());
    if (rank == 0) shared_doubles()[3] = err;
    return report(rank, err <= 1e-5, "params and buffers match the reference") &&
           report(rank, same_on_all_ranks(*pg, flat_state(*model)), "bitwise equal after join");
  });
  MESSAGE("Join with 3 vs 5 batches: max rel error " << shared_doubles()[3]);
}

TEST_CASE("ddp: uneven inputs without Join fail naming both step counts") {
  // The finished rank either stays alive (its peer times out) or exits (a connection error).
  for (const bool peer_exits : {false, true}) {
    CAPTURE(peer_exits);
    run_ranks(
        2,
        [peer_exits](int rank, std::shared_ptr<ProcessGroup> pg) {
          DistributedDataParallel ddp(std::make_shared<SmallNet>(), pg, {.store = rank_store()});
          const int my_steps = rank == 0 ? 3 : 2;
          auto t0 = disttest::Clock::now();
          try {
            for (int s = 0; s < my_steps; ++s) {
              loss_of(ddp, batch_x(s, 4), batch_y(s, 4)).backward();
              sgd_step(ddp);
            }
          } catch (const Error& e) {
            const double sec = disttest::seconds_since(t0);
            shared_doubles()[peer_exits ? 8 : 4] = sec;
            const std::string msg = e.what();
            std::cerr << "[rank " << rank << "] expected error after " << sec << " s: " << msg
                      << "\n";
            return report(rank,
                          rank == 0 && sec < 8 && contains(msg, "different numbers of steps") &&
                              contains(msg, "rank 0 reached step 3") &&
                              contains(msg, "rank 1 stopped after 2") && contains(msg, "Join") &&
                              contains(msg, "exited or died") &&
                              contains(msg, "Underlying error: gloo allreduce"),
                          "error names both step counts and the collective, in bounded time");
          }
          if (rank == 1 && !peer_exits) std::this_thread::sleep_for(3s);  // rank 0 times out
          return report(rank, rank == 1, "rank 0 finished without its peer");
        },
        1500ms);
  }
  MESSAGE("without Join: rank 0 failed after "
          << shared_doubles()[4] << " s (timeout 1.5 s), or after " << shared_doubles()[8]
          << " s when its peer exited");
}

TEST_CASE("ddp: a timeout with equal step counts keeps the collective error") {
  run_ranks(
      2,
      [](int rank, std::shared_ptr<ProcessGroup> pg) {
        DistributedDataParallel ddp(std::make_shared<SmallNet>(), pg, {.store = rank_store()});
        try {
          for (int s = 0; s < 3; ++s) {
            Tensor loss = loss_of(ddp, batch_x(s, 4), batch_y(s, 4));
            if (rank == 1 && s == 2) std::this_thread::sleep_for(3s);  // a stall, not uneven
            loss.backward();
            sgd_step(ddp);
          }
        } catch (const Error& e) {
          const std::string msg = e.what();
          return report(rank,
                        rank == 1 || (contains(msg, "allreduce") &&
                                      !contains(msg, "different numbers of steps")),
                        "rank 0 keeps the plain timeout error: " + msg);
        }
        return report(rank, rank == 1, "rank 0 finished without its stalled peer");
      },
      1500ms);
}

TEST_CASE("ddp: step counts are published once per synchronised step") {
  run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
    auto store = rank_store();
    const int steps = 100, rounds = 4;
    auto run = [&](DistributedDataParallel& ddp) {
      auto t0 = disttest::Clock::now();
      for (int s = 0; s < steps; ++s) loss_of(ddp, batch_x(s, 4), batch_y(s, 4)).backward();
      return disttest::seconds_since(t0) / steps;
    };
    DistributedDataParallel plain(std::make_shared<SmallNet>(), pg);
    auto counted = std::make_unique<DistributedDataParallel>(std::make_shared<SmallNet>(), pg,
                                                             DDPOptions{.store = store});
    run(plain);                             // warm-up
    double t_plain = 1e9, t_counted = 1e9;  // best of alternating rounds (a busy machine)
    for (int k = 0; k < rounds; ++k) {
      t_plain = std::min(t_plain, run(plain));
      t_counted = std::min(t_counted, run(*counted));
    }
    {
      auto guard = counted->no_sync();  // local steps talk to nobody: not counted
      loss_of(*counted, batch_x(0, 4), batch_y(0, 4)).backward();
    }
    counted.reset();  // the destructor flushes the publisher's last count
    auto t0 = disttest::Clock::now();
    for (int i = 0; i < 1000; ++i) store->set("probe/" + std::to_string(rank), std::to_string(i));
    const double t_set = disttest::seconds_since(t0) / 1000;  // a synchronous publish would
                                                              // cost this per step
    if (rank == 0) {
      shared_doubles()[5] = t_plain;
      shared_doubles()[6] = t_counted;
      shared_doubles()[7] = t_set;
    }
    const std::string key = "ddp/1/steps/" + std::to_string(rank);  // the first counted DDP
    return report(rank, store->get_string("ddp/instances") == "1", "one instance drawn") &&
           report(rank, store->get_string(key) == std::to_string(steps * rounds), "count " + key);
  });
  MESSAGE("DDP step (SmallNet, 2 ranks): "
          << shared_doubles()[5] * 1e6 << " us plain, " << shared_doubles()[6] * 1e6
          << " us publishing counts (background thread); one store set "
          << shared_doubles()[7] * 1e6 << " us");
}

TEST_CASE("ddp: world size 1 and transparent names") {
  run_ranks(1, [](int rank, std::shared_ptr<ProcessGroup> pg) {
    manual_seed(4);
    auto model = std::make_shared<SmallNet>(true);
    auto ref = model->clone();
    DistributedDataParallel ddp(model, pg);
    bool ok = report(rank,
                     ddp.state_dict().count("fc.weight") == 1 &&
                         ddp.state_dict().size() == model->state_dict().size(),
                     "no module. prefix");
    for (int s = 0; s < 3; ++s) {
      loss_of(ddp, batch_x(s, 4), batch_y(s, 4)).backward();
      sgd_step(ddp);
      loss_of(*ref, batch_x(s, 4), batch_y(s, 4)).backward();
      sgd_step(*ref);
    }
    ok = report(rank, max_rel_diff(model->state_dict(), ref->state_dict()) == 0,
                "bitwise equal to the plain model") &&
         ok;
    auto plain = std::make_shared<SmallNet>();
    { DistributedDataParallel gone(plain, pg); }  // its hooks stay on plain's parameters, inert
    loss_of(*plain, batch_x(0, 4), batch_y(0, 4)).backward();
    return report(rank, plain->fc->weight.grad().defined(), "backward after the DDP is gone") && ok;
  });
}

TEST_CASE("ddp: models that differ between ranks are named") {
  run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> pg) {
    try {
      DistributedDataParallel ddp(std::make_shared<SmallNet>(rank == 1), pg);  // bn on rank 1
    } catch (const Error& e) {
      std::string msg = e.what();
      return report(
          rank, contains(msg, "rank 1") && contains(msg, rank == 0 ? "'fc.weight'" : "'bn.weight'"),
          msg);
    }
    return report(rank, false, "no error for different models");
  });
}

TEST_CASE("ddp: buckets are capped, in reverse order, and rebuilt once in gradient order") {
  run_ranks(1, [](int rank, std::shared_ptr<ProcessGroup> pg) {
    auto model = std::make_shared<SmallNet>();  // conv.weight, conv.bias, fc.weight, fc.bias
    DistributedDataParallel ddp(model, pg, {.bucket_cap_mb = 1e-9, .first_bucket_mb = 1e-9});
    using B = std::vector<std::vector<size_t>>;
    bool ok = report(rank, ddp.bucket_indices() == B{{3}, {2}, {1}, {0}}, "initial layout");
    loss_of(ddp, batch_x(0, 4), batch_y(0, 4)).backward();
    ddp.forward(batch_x(1, 4));  // rebuilds in the observed order
    B after = ddp.bucket_indices();
    ok = report(rank, after.size() == 4 && after[0] == std::vector<size_t>{3}, "rebuilt") && ok;
    DistributedDataParallel big(std::make_shared<SmallNet>(), pg);  // 25 MiB: one bucket
    return report(rank, big.bucket_indices() == B{{3, 2, 1, 0}}, "one bucket") && ok;
  });
}

#else
TEST_CASE("ddp: the multi-process DDP cases need Gloo") {
  MINIDL_SKIP(testutil::kNoGloo);
}
#endif  // MINIDL_WITH_GLOO
