// DataLoader tests: identical batches for any worker count (random transform included), epoch
// shuffling, drop_last and size(), index coverage, worker errors with the batch index, restart
// and destruction mid-epoch, the bounded prefetch buffer, pin_memory and bad options.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <sstream>
#include <thread>

#include "data/dataloader.h"
#include "data/transforms.h"
#include "tensor/pinned.h"
#include "test_util.h"

using namespace minidl;
using namespace minidl::data;
using testutil::random_tensor;
using testutil::to_f64;

namespace {

// A TensorDataset of n samples x:[1,6,6], target = index, that can sleep, fail and count calls.
class ProbeDataset : public Dataset {
 public:
  explicit ProbeDataset(int64_t n, int64_t fail_at = -1, int sleep_ms = 0)
      : base_(random_tensor({n, 1, 6, 6}, kFloat32, 17), arange(n, kInt64)),
        fail_at_(fail_at),
        sleep_ms_(sleep_ms) {}
  int64_t size() const override { return base_.size(); }
  Example get(int64_t i, Generator& gen) const override { return base_.get(i, gen); }
  Example get_batch(const std::vector<int64_t>& idx, Generator& gen) const override {
    ++calls;
    if (sleep_ms_) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    for (int64_t i : idx)
      if (i == fail_at_) throw Error("probe: sample " + std::to_string(i) + " is corrupt");
    return base_.get_batch(idx, gen);
  }
  mutable std::atomic<int> calls{0};

 private:
  TensorDataset base_;
  int64_t fail_at_;
  int sleep_ms_;
};

std::shared_ptr<Dataset> cropped(std::shared_ptr<const Dataset> base) {
  return std::make_shared<TransformDataset>(std::move(base), std::make_shared<RandomCrop>(6, 2));
}

struct Epoch {
  std::vector<std::vector<double>> data;
  std::vector<std::vector<int64_t>> targets;
};

Epoch run_epoch(DataLoader& loader, int64_t epoch) {
  Epoch out;
  for (Example& b : loader.epoch(epoch)) {
    out.data.push_back(to_f64(b.data));
    out.targets.push_back(b.target.tolist<int64_t>());
  }
  return out;
}

std::vector<int64_t> flat(const Epoch& e) {
  std::vector<int64_t> all;
  for (const auto& t : e.targets) all.insert(all.end(), t.begin(), t.end());
  return all;
}

}  // namespace

TEST_CASE("DataLoader batches are identical for 0, 1 and 3 workers") {
  auto ds = cropped(std::make_shared<ProbeDataset>(50));
  std::vector<Epoch> runs;
  for (int workers : {0, 1, 3}) {
    for (int prefetch : {1, 2}) {
      DataLoader loader(ds, {.batch_size = 8,
                             .shuffle = true,
                             .seed = 5,
                             .num_workers = workers,
                             .prefetch_factor = prefetch});
      runs.push_back(run_epoch(loader, 2));
      CHECK(loader.stats().batches == 7);
    }
  }
  REQUIRE(runs[0].data.size() == 7);
  CHECK(runs[0].targets.back().size() == 2);  // 50 = 6 * 8 + 2
  for (size_t r = 1; r < runs.size(); ++r) {
    CHECK(runs[r].data == runs[0].data);
    CHECK(runs[r].targets == runs[0].targets);
  }
  // The crop is random: batches differ from the uncropped data and between seeds.
  DataLoader other(ds, {.batch_size = 8, .shuffle = true, .seed = 6, .num_workers = 2});
  CHECK(run_epoch(other, 2).data != runs[0].data);
}

TEST_CASE("DataLoader shuffles per epoch and covers every index once") {
  auto ds = std::make_shared<ProbeDataset>(37);
  DataLoader loader(ds, {.batch_size = 5, .shuffle = true, .seed = 1, .num_workers = 2});
  CHECK(loader.size() == 8);
  auto e0 = flat(run_epoch(loader, 0)), e1 = flat(run_epoch(loader, 1));
  auto e0b = flat(run_epoch(loader, 0));
  CHECK(e0 == e0b);
  CHECK(e0 != e1);
  CHECK(e0 == torch_randperm(37, 1));  // RandomSampler(seed): randperm(seed + epoch)
  std::sort(e1.begin(), e1.end());
  for (int64_t i = 0; i < 37; ++i) CHECK(e1[size_t(i)] == i);
  DataLoader seq(ds, {.batch_size = 5});
  auto s = flat(run_epoch(seq, 3));
  CHECK(s == SequentialSampler(37).indices(0));
}

TEST_CASE("DataLoader drop_last, size and an explicit sampler") {
  auto ds = std::make_shared<ProbeDataset>(10);
  for (int workers : {0, 2}) {
    DataLoader keep(ds, {.batch_size = 3, .num_workers = workers});
    DataLoader drop(ds, {.batch_size = 3, .drop_last = true, .num_workers = workers});
    CHECK(keep.size() == 4);
    CHECK(drop.size() == 3);
    auto k = run_epoch(keep, 0), d = run_epoch(drop, 0);
    CHECK(k.targets.size() == 4);
    CHECK(k.targets.back() == std::vector<int64_t>{9});
    CHECK(d.targets.size() == 3);
    CHECK(flat(d) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8});
  }
  auto sampler = std::make_shared<DistributedSampler>(10, 3, 1, true, 4);
  DataLoader dist(ds, {.batch_size = 2, .shuffle = false, .num_workers = 1}, sampler);
  CHECK(dist.size() == 2);
  CHECK(flat(run_epoch(dist, 1)) == sampler->indices(1));
  DataLoader empty(std::make_shared<ProbeDataset>(0), {.batch_size = 4, .num_workers = 2});
  CHECK(empty.size() == 0);
  CHECK(run_epoch(empty, 0).targets.empty());
}

TEST_CASE("DataLoader rethrows worker exceptions with the batch index") {
  auto ds = std::make_shared<ProbeDataset>(20, /*fail_at=*/13);
  for (int workers : {0, 2}) {
    INFO("num_workers=", workers);
    DataLoader loader(ds, {.batch_size = 4, .num_workers = workers});
    loader.start_epoch(0);
    Example b;
    for (int i = 0; i < 3; ++i) CHECK(loader.next(b));
    CHECK_THROWS_WITH_AS(loader.next(b), doctest::Contains("batch 3 of epoch 0"), Error);
    CHECK_FALSE(loader.next(b));  // the epoch ends at the failed batch
    loader.start_epoch(1);        // a new epoch starts afresh
    CHECK(loader.next(b));
    CHECK(b.target.tolist<int64_t>() == std::vector<int64_t>{0, 1, 2, 3});
  }
  DataLoader loader(ds, {.batch_size = 4, .num_workers = 3});
  loader.start_epoch(0);
  Example b;
  std::string msg;
  try {
    while (loader.next(b)) {
    }
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK(msg.find("in a worker thread") != std::string::npos);
  CHECK(msg.find("sample 13 is corrupt") != std::string::npos);
}

TEST_CASE("DataLoader restarts and destructs mid-epoch without hanging") {
  auto ds = std::make_shared<ProbeDataset>(64, -1, /*sleep_ms=*/2);
  {
    DataLoader loader(ds, {.batch_size = 4, .num_workers = 3});
    loader.start_epoch(0);
    Example b;
    REQUIRE(loader.next(b));
    REQUIRE(loader.next(b));
    loader.start_epoch(1);  // abandons epoch 0 with workers busy
    auto e1 = flat(run_epoch(loader, 1));
    CHECK(e1 == SequentialSampler(64).indices(0));
    loader.start_epoch(2);
    REQUIRE(loader.next(b));
  }  // destroyed mid-epoch: joins its workers
  {
    DataLoader never(ds, {.batch_size = 4, .num_workers = 2});
    never.start_epoch(0);  // destroyed before any next()
  }
  DataLoader idle(ds, {.batch_size = 4, .num_workers = 2});  // never started
  Example b;
  CHECK_THROWS_WITH_AS(idle.next(b), doctest::Contains("start_epoch"), Error);
}

TEST_CASE("DataLoader prefetch is bounded by num_workers * prefetch_factor") {
  auto ds = std::make_shared<ProbeDataset>(100, -1, /*sleep_ms=*/1);
  DataLoader loader(ds, {.batch_size = 2, .num_workers = 2, .prefetch_factor = 2});
  loader.start_epoch(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  CHECK(ds->calls.load() <= 4);  // 50 batches, but at most 4 built ahead of the consumer
  CHECK(ds->calls.load() >= 1);
  Example b;
  REQUIRE(loader.next(b));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  CHECK(ds->calls.load() <= 5);
  CHECK(loader.stats().batches == 1);
  CHECK(loader.stats().wait_seconds >= 0);
  loader.reset_stats();
  CHECK(loader.stats().batches == 0);
}

TEST_CASE("DataLoader pin_memory") {
  auto ds = std::make_shared<ProbeDataset>(8);
  std::ostringstream captured;
  auto* old = std::cerr.rdbuf(captured.rdbuf());
  DataLoader loader(ds, {.batch_size = 4, .num_workers = 1, .pin_memory = true});
  std::cerr.rdbuf(old);
  DataLoader plain(ds, {.batch_size = 4});
  auto pinned = run_epoch(loader, 0);
  CHECK(pinned.data == run_epoch(plain, 0).data);
  if (cuda_is_available()) {
    CHECK(captured.str().empty());
    loader.start_epoch(0);
    Example b;
    REQUIRE(loader.next(b));
    CHECK(is_pinned(b.data));
    CHECK(is_pinned(b.target));
    Generator gen(0);
    CHECK_FALSE(is_pinned(ds->get(0, gen).data));
  } else {
    CHECK(captured.str().find("pin_memory=true but no CUDA device") != std::string::npos);
    CHECK_FALSE(is_pinned(zeros({2})));
    CHECK_THROWS_AS(empty_pinned({2, 2}), Error);
  }
}

TEST_CASE("DataLoader rejects bad options") {
  auto ds = std::make_shared<ProbeDataset>(4);
  CHECK_THROWS_WITH_AS(DataLoader(ds, {.batch_size = 0}), doctest::Contains("batch_size"), Error);
  CHECK_THROWS_AS(DataLoader(ds, {.num_workers = -1}), Error);
  CHECK_THROWS_AS(DataLoader(ds, {.prefetch_factor = 0}), Error);
  CHECK_THROWS_AS(DataLoader(nullptr, {}), Error);
}
