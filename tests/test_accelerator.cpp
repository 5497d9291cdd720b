// The Accelerator (parallel/accelerator/accelerator.h): in every mode it trains bitwise like the
// hand-written single / DataParallel / DDP loop it replaces; accumulation equals the large batch;
// save_state / load_state resume bitwise; the collectives and the errors.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>

#include "dist_test_util.h"
#include "parallel/accelerator/accelerator.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/distributed.h"
#include "parallel/store/tcp_store.h"
#include "parallel_test_models.h"
#include "pg_test_util.h"
#include "skip.h"

using namespace minidl;
using disttest::contains;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t kSeed = 7;

// x:[B,1,8,8] -> SmallNet -> dropout (draws from the default generator: tests the RNG streams).
class DropNet : public nn::Cloneable<DropNet> {
 public:
  DropNet() {
    body = std::make_shared<ptest::SmallNet>();
    register_module("body", &body);
    drop = std::make_shared<nn::Dropout>(0.25);
    register_module("drop", &drop);
  }
  Tensor forward(const Tensor& x) override { return drop->forward(body->forward(x)); }
  std::string name() const override { return "DropNet"; }
  std::shared_ptr<ptest::SmallNet> body;
  std::shared_ptr<nn::Dropout> drop;
};

std::shared_ptr<data::TensorDataset> make_dataset(int64_t n, DType dtype = kFloat32) {
  return std::make_shared<data::TensorDataset>(ptest::batch_x(0, n).to(dtype),
                                               ptest::batch_y(0, n));
}

Tensor flat_params(nn::Module& m) {
  std::vector<Tensor> parts;
  for (auto& p : m.parameters()) parts.push_back(p.detach().to(kFloat64).flatten());
  return cat(parts, 0);
}

bool bitwise_equal(nn::Module& a, nn::Module& b) {
  return equal(flat_params(a), flat_params(b));
}

// The loop written once: `epochs` epochs through the Accelerator.
void train_with(Accelerator& acc, PreparedLoader& loader, int epochs) {
  for (int e = 0; e < epochs; ++e)
    for (data::Example& b : loader) {
      acc.zero_grad();
      Tensor loss = nn::functional::cross_entropy(acc.forward(b.data), b.target);
      acc.backward(loss);
      acc.step();
    }
}

// The hand-written loop it replaces: DistributedSampler share, per-rank dropout stream, `net`
// (the model, or its DDP / DataParallel wrapper).
void train_by_hand(nn::Module& net, optim::Optimizer& opt, const std::shared_ptr<data::Dataset>& ds,
                   int world, int rank, int64_t batch, int epochs) {
  auto sampler = std::make_shared<data::DistributedSampler>(ds->size(), world, rank, true, kSeed);
  data::DataLoader loader(ds, {.batch_size = batch, .seed = kSeed}, sampler);
  for (int e = 1; e <= epochs; ++e) {
    loader.start_epoch(e);
    data::Example b;
    while (loader.next(b)) {
      opt.zero_grad();
      nn::functional::cross_entropy(net(b.data), b.target).backward();
      opt.step();
    }
  }
}

}  // namespace

TEST_CASE("accelerator: single mode trains bitwise like the hand-written loop") {
  auto ds = make_dataset(40);
  manual_seed(kSeed);
  auto ref = std::make_shared<DropNet>();
  manual_seed(kSeed);
  auto model = std::make_shared<DropNet>();
  REQUIRE(bitwise_equal(*ref, *model));

  optim::AdamW ref_opt(ref->parameters(), 1e-2);
  manual_seed(dist::rank_seed(kSeed, 0));
  train_by_hand(*ref, ref_opt, ds, 1, 0, 8, 2);

  Accelerator acc({.mode = "single", .seed = kSeed});
  optim::AdamW opt(model->parameters(), 1e-2);
  auto net = acc.prepare(model, opt);
  CHECK(net.get() == model.get());
  CHECK(acc.mode() == "single");
  CHECK(acc.num_processes() == 1);
  CHECK(acc.is_main_process());
  CHECK(acc.describe() == "1 process, cpu");
  auto loader = acc.prepare_data_loader(ds, {.batch_size = 8}, /*shuffle=*/true);
  CHECK(loader->size() == 5);
  train_with(acc, *loader, 2);
  CHECK(loader->epoch() == 2);
  CHECK(acc.optimizer_steps() == 10);
  CHECK(bitwise_equal(*ref, *model));
}

TEST_CASE("accelerator: dp mode trains bitwise like a hand-written DataParallel") {
  auto ds = make_dataset(32);
  manual_seed(kSeed);
  auto ref = std::make_shared<ptest::SmallNet>();
  manual_seed(kSeed);
  auto model = std::make_shared<ptest::SmallNet>();

  optim::SGD ref_opt(ref->parameters(), 0.05);
  dist::DataParallel ref_dp(ref, {kCPU, kCPU});
  train_by_hand(ref_dp, ref_opt, ds, 1, 0, 8, 2);

  Accelerator acc({.mode = "dp", .devices = 2, .seed = kSeed});
  optim::SGD opt(model->parameters(), 0.05);
  auto net = acc.prepare(model, opt);
  REQUIRE(acc.data_parallel() != nullptr);
  CHECK(acc.parallel_degree() == 2);
  CHECK(acc.devices().size() == 2);
  CHECK(&acc.unwrap_model() == model.get());
  auto loader = acc.prepare_data_loader(ds, {.batch_size = 8}, true);
  train_with(acc, *loader, 2);
  CHECK(bitwise_equal(*ref, *model));
  CHECK(contains(acc.peak_memory_summary(), "cpu"));
}

TEST_CASE("accelerator: 4 micro-batches equal one batch of 4x the size") {
  auto ds = make_dataset(32, kFloat64);
  manual_seed(kSeed);
  auto big = std::make_shared<ptest::SmallNet>();
  big->to(kFloat64);
  auto small = std::static_pointer_cast<ptest::SmallNet>(big->clone());

  Accelerator acc_big({.mode = "single", .seed = kSeed});
  optim::SGD opt_big(big->parameters(), 0.1);
  acc_big.prepare(big, opt_big);
  auto loader_big = acc_big.prepare_data_loader(ds, {.batch_size = 16}, false);

  Accelerator acc({.mode = "single", .grad_accum_steps = 4, .seed = kSeed});
  optim::SGD opt(small->parameters(), 0.1);
  acc.prepare(small, opt);
  auto loader = acc.prepare_data_loader(ds, {.batch_size = 4}, false);

  for (data::Example& b : *loader_big) {
    acc_big.zero_grad();
    acc_big.backward(nn::functional::cross_entropy(acc_big.forward(b.data), b.target));
    CHECK(acc_big.step() == StepResult::applied);
  }
  std::vector<StepResult> results;
  for (data::Example& b : *loader) {
    acc.zero_grad();  // a no-op inside a window
    CHECK(acc.sync_gradients() == (results.size() % 4 == 3));
    acc.backward(nn::functional::cross_entropy(acc.forward(b.data), b.target));
    results.push_back(acc.step());
  }
  REQUIRE(results.size() == 8);
  for (size_t i = 0; i < results.size(); ++i)
    CHECK(results[i] == (i % 4 == 3 ? StepResult::applied : StepResult::accumulating));
  CHECK(acc.optimizer_steps() == 2);
  CHECK(max(abs(flat_params(*big) - flat_params(*small))).item<double>() < 1e-13);
  // The last batch of an epoch closes a window early: 3 micro-batches of 4 (12 samples).
  auto short_loader = acc.prepare_data_loader(make_dataset(12, kFloat64), {.batch_size = 4}, false);
  int steps = 0;
  for (data::Example& b : *short_loader) {
    acc.zero_grad();
    acc.backward(nn::functional::cross_entropy(acc.forward(b.data), b.target));
    steps += acc.step() == StepResult::applied;
  }
  CHECK(steps == 1);
}

TEST_CASE("accelerator: save_state / load_state resume bitwise") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("minidl_acc_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "state.safetensors").string();
  auto ds = make_dataset(24);
  auto run = [&](int epochs_before, bool resume) {
    manual_seed(resume ? 99 : kSeed);  // a resumed run starts from other weights
    auto model = std::make_shared<DropNet>();
    Accelerator acc({.mode = "single", .seed = kSeed});
    optim::AdamW opt(model->parameters(), 1e-2);
    optim::StepLR sched(opt, 1, 0.5);
    acc.prepare(model, opt);
    acc.prepare_scheduler(sched);
    auto loader = acc.prepare_data_loader(ds, {.batch_size = 8}, true);
    if (resume) {
      auto meta = acc.load_state(path);
      CHECK(meta.at("note") == "after 2");
      CHECK(loader->epoch() == 2);
      CHECK(acc.optimizer_steps() == 6);
    }
    for (int e = resume ? 2 : 0; e < 3; ++e) {
      train_with(acc, *loader, 1);
      sched.step();
      if (!resume && e + 1 == epochs_before) acc.save_state(path, {{"note", "after 2"}});
    }
    return flat_params(*model);
  };
  Tensor straight = run(2, false);
  Tensor resumed = run(0, true);
  CHECK(equal(straight, resumed));
  // A corrupt file is an error naming it; the model is left as it was.
  {
    std::FILE* f = std::fopen(path.c_str(), "r+b");
    REQUIRE(f);
    std::fseek(f, 100, SEEK_SET);
    std::fputc(0x5a, f);
    std::fclose(f);
    auto model = std::make_shared<DropNet>();
    Accelerator acc({.mode = "single"});
    optim::AdamW opt(model->parameters(), 1e-2);
    acc.prepare(model, opt);
    Tensor before = flat_params(*model);
    auto err = disttest::expect_error([&] { acc.load_state(path); });
    CHECK(contains(err.message, path));
    CHECK(equal(before, flat_params(*model)));
  }
  fs::remove_all(dir);
}

TEST_CASE("accelerator: bad options and misuse are one-line errors") {
  CHECK(contains(disttest::expect_error([] { Accelerator acc({.mode = "fsdp"}); }).message,
                 "mode must be single, dp, ddp or auto, got 'fsdp'"));
  CHECK(contains(disttest::expect_error([] { Accelerator acc({.grad_accum_steps = 0}); }).message,
                 "grad_accum_steps must be >= 1, got 0"));
  Accelerator acc({.mode = "single", .amp = "fp8"});
  CHECK(contains(disttest::expect_error([&] { acc.model(); }).message, "prepare() has not"));
  auto model = std::make_shared<ptest::SmallNet>();
  optim::SGD opt(model->parameters(), 0.1);
  CHECK(contains(disttest::expect_error([&] { acc.prepare(model, opt); }).message,
                 "amp must be off, bf16 or fp16, got 'fp8'"));
  // Outside ddp the collectives are identities.
  Tensor t = ptest::batch_x(1, 3);
  CHECK(equal(acc.gather(t), t));
  CHECK(equal(acc.pad_across_processes(t, 1), t));
  CHECK(equal(acc.reduce(t, "sum"), t));
  CHECK(acc.reduce(2.5) == 2.5);
  CHECK(acc.gather_for_metrics(t, 2).size(0) == 2);
  CHECK(contains(disttest::expect_error([&] { acc.reduce(t, "max"); }).message,
                 "op must be sum or mean, got 'max'"));
}

#if MINIDL_WITH_GLOO
TEST_CASE("accelerator: ddp (2 ranks) trains bitwise like hand-written DDP with no_sync") {
  std::string port;
  {
    dist::TcpStore probe({.port = 0, .is_master = true});
    port = std::to_string(probe.port());
  }
  auto reports = pgtest::run_ranks(
      2,
      [&](int rank, std::shared_ptr<dist::Store>) -> std::string {
        ::setenv("MASTER_ADDR", "127.0.0.1", 1);
        ::setenv("MASTER_PORT", port.c_str(), 1);
        ::setenv("RANK", std::to_string(rank).c_str(), 1);
        ::setenv("WORLD_SIZE", "2", 1);
        ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
        ::setenv("LOCAL_WORLD_SIZE", "2", 1);
        set_num_threads(1);
        auto ds = make_dataset(40);
        Accelerator acc({.mode = "auto", .grad_accum_steps = 2, .seed = kSeed, .threads = 1});
        if (acc.mode() != "ddp" || acc.num_processes() != 2 || acc.process_index() != rank)
          return "layout: " + acc.describe();
        manual_seed(kSeed);
        auto ref = std::make_shared<ptest::SmallNet>();
        manual_seed(kSeed);
        auto model = std::make_shared<ptest::SmallNet>();
        // By hand: DDP, DistributedSampler share, loss / 2 and no_sync on odd micro-batches.
        optim::SGD ref_opt(ref->parameters(), 0.05);
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
              ref_opt.step();
            }
          }
        }
        optim::SGD opt(model->parameters(), 0.05);
        acc.prepare(model, opt);
        if (!acc.ddp()) return "no DDP wrapper";
        auto loader = acc.prepare_data_loader(ds, {.batch_size = 4}, true);
        train_with(acc, *loader, 2);
        if (!bitwise_equal(*ref, *model)) return "Accelerator differs from hand-written DDP";
        if (acc.optimizer_steps() != 6) return "steps " + std::to_string(acc.optimizer_steps());
        // 10 micro-batches, 6 windows: only the windows' last backward synchronised (no_sync).
        if (acc.ddp()->stats().steps != 6)
          return "synchronised steps " + std::to_string(acc.ddp()->stats().steps);
        // Collectives.
        Tensor mine = full({2, 1}, double(rank + 1));
        Tensor g = acc.gather(mine);  // [4,1] = 1 1 2 2
        if (!equal(g, tensor(std::vector<float>{1, 1, 2, 2}).reshape({4, 1}))) return "gather";
        if (sum(acc.reduce(mine, "sum")).item<double>() != 6.0) return "reduce sum";
        if (acc.reduce(double(rank), "mean") != 0.5) return "reduce mean";
        Tensor ragged = full({rank + 1, 2}, 1.0);  // rank 0: 1 row, rank 1: 2 rows
        Tensor padded = acc.pad_across_processes(ragged, 0, -1.0);
        if (padded.size(0) != 2) return "pad_across_processes size";
        if (rank == 0 && padded.contiguous().to(kFloat64).data_ptr<double>()[2] != -1.0)
          return "pad value";
        auto err = disttest::expect_error([&] { acc.gather(ragged); });
        if (!contains(err.message, "rank 1 has [2, 2]") &&
            !contains(err.message, "rank 0 has [1, 2]"))
          return "ragged gather error: " + err.message;
        // Per-sample rows in sampler order: 5 samples over 2 ranks (rank 1 holds the padding).
        Tensor rows = tensor(std::vector<float>{float(rank), float(rank + 2), float(rank + 4)});
        Tensor all = acc.gather_for_metrics(rows, 5);
        if (!equal(all, tensor(std::vector<float>{0, 1, 2, 3, 4}))) return "gather_for_metrics";
        // bool flags (e.g. per-sample "correct") in every mode, as in single and dp
        Tensor flags = acc.gather_for_metrics(gt(rows, 1.5), 5);
        if (flags.dtype() != kBool ||
            !equal(flags.to(kUInt8), tensor(std::vector<float>{0, 0, 1, 1, 1}).to(kUInt8)))
          return "gather_for_metrics of bool";
        Tensor g_bool = acc.gather(eq(mine, 2.0));  // [4,1] = F F T T
        if (g_bool.dtype() != kBool || sum(g_bool).item<int64_t>() != 2) return "gather of bool";
        acc.wait_for_everyone();
        return "";
      },
      20000ms);
  for (size_t r = 0; r < reports.size(); ++r)
    CHECK_MESSAGE(reports[r].text == "OK", "rank ", r, ": ", reports[r].text);
}
#else
TEST_CASE("accelerator: the 2-rank ddp mode case needs Gloo") {
  MINIDL_SKIP(testutil::kNoGloo);
}
#endif
