// DataLoader: batches from a Dataset in sampler order, produced by worker threads into a
// bounded prefetch queue. Batch b of epoch e is built with a generator seeded from
// (seed, e, b), so the batches are identical whatever the worker count.
#pragma once
#include <cstdint>
#include <memory>

#include "data/dataset.h"
#include "data/sampler.h"

namespace minidl::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;     // without an explicit sampler: RandomSampler(seed) vs Sequential
  bool drop_last = false;   // drop the last incomplete batch
  uint64_t seed = 0;        // shuffling and per-batch transform randomness
  int num_workers = 0;      // 0: batches are built on the calling thread
  int prefetch_factor = 2;  // batches queued per worker
  bool pin_memory = false;  // batches in page-locked host memory (needs CUDA; else a warning)
};

// Time the consumer spent waiting for batches, for loader-overhead reports.
struct LoaderStats {
  int64_t batches = 0;
  double wait_seconds = 0;  // inside next(): blocked on the queue or building inline
};

class DataLoader {
 public:
  // `sampler` overrides options.shuffle (like torch's sampler= argument).
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options,
             std::shared_ptr<const Sampler> sampler = nullptr);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Batches per epoch (len(loader)).
  int64_t size() const;
  const DataLoaderOptions& options() const { return options_; }

  // Starts epoch `epoch` (sampler order and randomness depend on it; this is set_epoch for the
  // DistributedSampler too). Stops workers of an unfinished previous epoch.
  void start_epoch(int64_t epoch);
  // The next batch of the current epoch into `batch`; false at the end of the epoch. An
  // exception in a worker is rethrown here (with the batch index).
  bool next(Example& batch);
  const LoaderStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

  // Range-for over one epoch: for (Example& b : loader.epoch(e)) { ... }
  class Iterator;
  class EpochRange;
  EpochRange epoch(int64_t epoch);

 private:
  struct State;
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<const Sampler> sampler_;
  std::unique_ptr<State> state_;
  LoaderStats stats_;
};

class DataLoader::Iterator {
 public:
  Iterator(DataLoader* loader, bool end);
  Example& operator*() { return batch_; }
  Iterator& operator++();
  bool operator!=(const Iterator& o) const { return loader_ != o.loader_; }

 private:
  DataLoader* loader_;  // nullptr once exhausted (== end)
  Example batch_;
};

class DataLoader::EpochRange {
 public:
  explicit EpochRange(DataLoader* loader) : loader_(loader) {}
  Iterator begin() { return Iterator(loader_, false); }
  Iterator end() { return Iterator(nullptr, true); }

 private:
  DataLoader* loader_;
};

}  // namespace minidl::data
