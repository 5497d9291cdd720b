// DataLoader: batches in batch sampler order, built inline (num_workers = 0) or by worker threads
// that take batch numbers from an atomic counter into a bounded reorder buffer; next() hands them
// out strictly in order. Batch b of epoch e draws from Generator(mix(seed, e, b)).
#include "data/dataloader.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "tensor/error.h"
#include "tensor/pinned.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace minidl::data {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The seed of batch `b` of epoch `e`: independent of which thread builds it.
uint64_t batch_seed(uint64_t seed, int64_t epoch, int64_t b) {
  return splitmix64(splitmix64(splitmix64(seed) ^ uint64_t(epoch)) ^ uint64_t(b));
}

// One built batch (or the exception that building it threw).
struct Slot {
  Example batch;
  std::exception_ptr error;
};

}  // namespace

// One epoch's worker threads and their reorder buffer.
struct WorkerRun {
  std::mutex mutex;
  std::condition_variable produced;  // a slot was added
  std::condition_variable consumed;  // the consumer advanced, or stop
  std::map<int64_t, Slot> ready;     // built batches not yet handed out, by batch number
  int64_t consumer_next = 0;         // the batch next() waits for
  int64_t capacity = 1;              // batches in flight + ready <= capacity
  bool stop = false;
  std::atomic<int64_t> next_task{0};
  std::vector<std::thread> threads;

  // Stops the workers (each finishes the batch it is building) and joins them.
  void shutdown() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    consumed.notify_all();
    for (auto& t : threads)
      if (t.joinable()) t.join();
    threads.clear();
  }
};

struct DataLoader::State {
  int64_t epoch = 0;
  bool started = false;
  std::vector<std::vector<int64_t>> batches;  // the epoch's batch sampler output
  int64_t num_batches = 0;
  int64_t next = 0;  // the batch next() returns
  std::unique_ptr<WorkerRun> run;

  void stop_workers() {
    if (run) run->shutdown();
    run.reset();
  }
};

namespace {

void check_options(const DataLoaderOptions& options) {
  MINIDL_CHECK(options.batch_size >= 1, "DataLoader: batch_size must be >= 1, got ",
               options.batch_size);
  MINIDL_CHECK(options.num_workers >= 0, "DataLoader: num_workers must be >= 0, got ",
               options.num_workers);
  MINIDL_CHECK(options.prefetch_factor >= 1, "DataLoader: prefetch_factor must be >= 1, got ",
               options.prefetch_factor);
  if (options.pin_memory && !cuda_is_available())
    std::cerr << "minidl DataLoader: pin_memory=true but no CUDA device; using pageable memory\n";
}

}  // namespace

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options,
                       std::shared_ptr<const Sampler> sampler)
    : dataset_(std::move(dataset)),
      options_(std::move(options)),
      state_(std::make_unique<State>()) {
  MINIDL_CHECK(dataset_ != nullptr, "DataLoader: dataset is null");
  check_options(options_);
  if (!sampler) {
    const int64_t n = dataset_->size();
    if (options_.shuffle)
      sampler = std::make_shared<RandomSampler>(n, options_.seed);
    else
      sampler = std::make_shared<SequentialSampler>(n);
  }
  batch_sampler_ =
      std::make_shared<BatchSampler>(std::move(sampler), options_.batch_size, options_.drop_last);
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset,
                       std::shared_ptr<const BatchSampler> batch_sampler, DataLoaderOptions options,
                       int /*batch_sampler_tag*/)
    : dataset_(std::move(dataset)),
      options_(std::move(options)),
      batch_sampler_(std::move(batch_sampler)),
      state_(std::make_unique<State>()) {
  MINIDL_CHECK(dataset_ != nullptr, "DataLoader: dataset is null");
  MINIDL_CHECK(batch_sampler_ != nullptr, "DataLoader: batch_sampler is null");
  MINIDL_CHECK(options_.batch_size == 1 && !options_.shuffle && !options_.drop_last,
               "DataLoader: batch_sampler option is mutually exclusive with batch_size, shuffle, "
               "sampler, and drop_last (got batch_size=",
               options_.batch_size, ", shuffle=", options_.shuffle,
               ", drop_last=", options_.drop_last, ")");
  check_options(options_);
}

DataLoader::~DataLoader() {
  state_->stop_workers();
}

int64_t DataLoader::size() const {
  return batch_sampler_->size();
}

namespace {

// Builds batch `b` of an epoch from its indices: get_batch, or get per index and collate_fn.
Example build_batch(const Dataset& dataset, const DataLoaderOptions& opt,
                    const std::vector<int64_t>& idx, int64_t epoch, int64_t b) {
  MINIDL_CHECK(!idx.empty(), "DataLoader: the batch sampler returned an empty batch");
  Generator gen(batch_seed(opt.seed, epoch, b));
  Example batch;
  if (opt.collate_fn) {
    std::vector<Example> samples;
    samples.reserve(idx.size());
    for (int64_t i : idx) samples.push_back(dataset.get(i, gen));
    batch = opt.collate_fn(samples);
  } else {
    batch = dataset.get_batch(idx, gen);
  }
  if (opt.pin_memory && cuda_is_available()) {
    batch.data = pin_memory(batch.data);
    if (batch.target.defined()) batch.target = pin_memory(batch.target);
  }
  return batch;
}

[[noreturn]] void rethrow_batch_error(const std::exception_ptr& error, int64_t epoch, int64_t b,
                                      bool worker) {
  const std::string where = "DataLoader: building batch " + std::to_string(b) + " of epoch " +
                            std::to_string(epoch) + (worker ? " in a worker thread" : "") +
                            " failed: ";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    throw Error(where + e.what());
  } catch (...) {
    throw Error(where + "unknown exception");
  }
}

}  // namespace

void DataLoader::start_epoch(int64_t epoch) {
  State& s = *state_;
  s.stop_workers();
  s.started = false;  // stays false if the sampler throws
  s.epoch = epoch;
  s.batches = batch_sampler_->batches(epoch);
  s.num_batches = int64_t(s.batches.size());
  s.next = 0;
  s.started = true;
  if (options_.num_workers == 0 || s.num_batches == 0) return;

  s.run = std::make_unique<WorkerRun>();
  WorkerRun* run = s.run.get();
  run->capacity = int64_t(options_.num_workers) * options_.prefetch_factor;
  const int64_t num_batches = s.num_batches;
  auto worker = [this, run, num_batches, epoch] {
#ifdef _OPENMP
    omp_set_num_threads(1);  // like torch's workers: parallelism comes from the workers
#endif
    for (;;) {
      const int64_t b = run->next_task.fetch_add(1);
      if (b >= num_batches) return;
      {
        std::unique_lock<std::mutex> lock(run->mutex);
        run->consumed.wait(lock,
                           [&] { return run->stop || b < run->consumer_next + run->capacity; });
        if (run->stop) return;
      }
      Slot slot;
      try {
        slot.batch = build_batch(*dataset_, options_, state_->batches[size_t(b)], epoch, b);
      } catch (...) {
        slot.error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(run->mutex);
        run->ready.emplace(b, std::move(slot));
      }
      run->produced.notify_all();
    }
  };
  const int workers = int(std::min<int64_t>(options_.num_workers, num_batches));
  try {
    for (int w = 0; w < workers; ++w) run->threads.emplace_back(worker);
  } catch (...) {
    s.stop_workers();  // thread creation failed: join the ones that started
    throw;
  }
}

bool DataLoader::next(Example& batch) {
  State& s = *state_;
  MINIDL_CHECK(s.started, "DataLoader::next: no epoch started; call start_epoch(epoch) first");
  if (s.next >= s.num_batches) {
    s.stop_workers();
    return false;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t b = s.next++;
  Slot slot;
  if (!s.run) {
    try {
      slot.batch = build_batch(*dataset_, options_, s.batches[size_t(b)], s.epoch, b);
    } catch (...) {
      slot.error = std::current_exception();
    }
  } else {
    WorkerRun& run = *s.run;
    std::unique_lock<std::mutex> lock(run.mutex);
    run.produced.wait(lock, [&] { return run.ready.count(b) > 0; });
    auto it = run.ready.find(b);
    slot = std::move(it->second);
    run.ready.erase(it);
    run.consumer_next = b + 1;
    lock.unlock();
    run.consumed.notify_all();
  }
  stats_.wait_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (slot.error) {
    // The epoch ends at a failed batch (no silent skipping); start_epoch starts afresh.
    s.next = s.num_batches;
    const bool worker = s.run != nullptr;
    s.stop_workers();
    rethrow_batch_error(slot.error, s.epoch, b, worker);
  }
  batch = std::move(slot.batch);
  ++stats_.batches;
  return true;
}

DataLoader::EpochRange DataLoader::epoch(int64_t epoch) {
  start_epoch(epoch);
  return EpochRange(this);
}

DataLoader::Iterator::Iterator(DataLoader* loader, bool end) : loader_(end ? nullptr : loader) {
  if (loader_ && !loader_->next(batch_)) loader_ = nullptr;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  if (loader_ && !loader_->next(batch_)) loader_ = nullptr;
  return *this;
}

}  // namespace minidl::data
