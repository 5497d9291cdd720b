// DataLoader: batches from a Dataset in sampler (or batch sampler) order, produced by worker
// threads into a bounded prefetch queue. Batch b of epoch e is built with a generator seeded from
// (seed, e, b), so the batches are identical whatever the worker count.
#pragma once
#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

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
  // torch's collate_fn: turns the samples of a batch (dataset.get(i) for each index, in order)
  // into the batch, e.g. padding sequences of different lengths (nn::utils::rnn::pad_sequence).
  // Unset: dataset.get_batch (stacks the samples, like data::collate). Called from the worker
  // threads, so it must be safe to call concurrently.
  std::function<Example(const std::vector<Example>&)> collate_fn = nullptr;
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
  // torch's batch_sampler= argument: the batches are the batch sampler's index lists; as in
  // torch, options.batch_size must stay 1 and shuffle and drop_last false (the batch sampler
  // decides those). (A template so that DataLoader(ds, {}) still means default options.)
  template <class B>
  requires std::derived_from<B, BatchSampler> DataLoader(std::shared_ptr<const Dataset> dataset,
                                                         std::shared_ptr<B> batch_sampler,
                                                         DataLoaderOptions options = {})
      : DataLoader(std::move(dataset),
                   std::shared_ptr<const BatchSampler>(std::move(batch_sampler)),
                   std::move(options), 0) {}
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
  DataLoader(std::shared_ptr<const Dataset> dataset,
             std::shared_ptr<const BatchSampler> batch_sampler, DataLoaderOptions options,
             int /*batch_sampler_tag*/);
  struct State;
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<const BatchSampler> batch_sampler_;
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
