// BatchSampler against PyTorch 1.13 (tests/data/data_utils.json), the DataLoader's batch_sampler
// and collate_fn (variable-length samples padded by pad_sequence), and pad_sequence's values and
// gradients against PyTorch 2.6 (tools/golden/pad_sequence.py -> tests/data/pad_sequence.json).
#include <doctest/doctest.h>

#include <atomic>

#include "autograd/ops.h"
#include "data/dataloader.h"
#include "data/sampler.h"
#include "data/transforms.h"
#include "golden.h"
#include "nn/padding.h"

using namespace minidl;
using namespace minidl::data;
using minidl::nn::utils::rnn::pad_sequence;
using testutil::check_close;
using testutil::golden;
using testutil::json;

namespace {

// n samples whose data row i is [i, 10 i] and whose target is i.
std::shared_ptr<TensorDataset> numbered(int64_t n) {
  Tensor t = arange(0, n, 1, kInt64);
  return std::make_shared<TensorDataset>(stack({t, mul(t, Scalar(10))}, 1), t);
}

// Fixed batches, different each epoch: what a bucketing batch sampler hands the DataLoader.
class ListBatchSampler : public BatchSampler {
 public:
  explicit ListBatchSampler(std::vector<std::vector<std::vector<int64_t>>> per_epoch)
      : per_epoch_(std::move(per_epoch)) {}
  int64_t size() const override { return int64_t(per_epoch_[0].size()); }
  std::vector<std::vector<int64_t>> batches(int64_t epoch) const override {
    return per_epoch_[size_t(epoch) % per_epoch_.size()];
  }

 private:
  std::vector<std::vector<std::vector<int64_t>>> per_epoch_;
};

// Sample i is the sequence [i, i, ...] of length i % 4 + 1 (f32), target i.
class SequenceDataset : public Dataset {
 public:
  explicit SequenceDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Example get(int64_t i, Generator&) const override {
    return {full({i % 4 + 1}, Scalar(double(i)), kFloat32), scalar_tensor(Scalar(i), kInt64)};
  }

 private:
  int64_t n_;
};

std::vector<std::vector<int64_t>> batch_targets(DataLoader& loader, int64_t epoch) {
  std::vector<std::vector<int64_t>> out;
  for (Example& b : loader.epoch(epoch)) out.push_back(b.target.tolist<int64_t>());
  return out;
}

}  // namespace

TEST_CASE("BatchSampler matches torch.utils.data.BatchSampler") {
  for (const json& c : golden("data_utils.json")["batch_sampler"]) {
    const int64_t n = c["n"].get<int64_t>(), seed = c["seed"].get<int64_t>();
    INFO("n=", n, " batch_size=", c["batch_size"].get<int64_t>(), " seed=", seed);
    std::shared_ptr<const Sampler> base;
    if (seed < 0)
      base = std::make_shared<SequentialSampler>(n);
    else
      base = std::make_shared<RandomSampler>(n, uint64_t(seed));
    BatchSampler b(base, c["batch_size"].get<int64_t>(), c["drop_last"].get<bool>());
    CHECK(b.size() == c["size"].get<int64_t>());
    CHECK(b.batches(0) == c["batches"].get<std::vector<std::vector<int64_t>>>());
  }
  // epochs follow the sampler's epochs: batch k of epoch 1 is a slice of RandomSampler's epoch 1
  auto random = std::make_shared<RandomSampler>(7, 3);
  BatchSampler b(random, 3, false);
  const auto e1 = b.batches(1);
  const auto order = random->indices(1);
  REQUIRE(e1.size() == 3);
  CHECK(e1[2] == std::vector<int64_t>{order[6]});
  CHECK(e1[0] == std::vector<int64_t>(order.begin(), order.begin() + 3));
  CHECK_THROWS_WITH_AS(BatchSampler(random, 0, false), doctest::Contains("batch_size=0"), Error);
  CHECK_THROWS_AS(BatchSampler(nullptr, 2, false), Error);
}

TEST_CASE("DataLoader with a batch_sampler yields its batches in order for any worker count") {
  auto ds = numbered(10);
  auto sampler = std::make_shared<ListBatchSampler>(std::vector<std::vector<std::vector<int64_t>>>{
      {{3, 1}, {0, 2, 4, 9}, {7}}, {{5, 6, 8}, {1}, {2, 0}}});
  const std::vector<std::vector<int64_t>> want0{{3, 1}, {0, 2, 4, 9}, {7}};
  const std::vector<std::vector<int64_t>> want1{{5, 6, 8}, {1}, {2, 0}};
  for (int workers : {0, 2}) {
    CAPTURE(workers);
    DataLoader loader(ds, sampler, {.num_workers = workers});
    CHECK(loader.size() == 3);
    CHECK(batch_targets(loader, 0) == want0);
    CHECK(batch_targets(loader, 1) == want1);
  }
  // torch's BatchSampler through batch_sampler= gives what batch_size=/drop_last= give
  auto shuffled = std::make_shared<RandomSampler>(10, 5);
  DataLoader by_sampler(ds, std::make_shared<BatchSampler>(shuffled, 4, true));
  DataLoader by_options(ds, {.batch_size = 4, .drop_last = true}, shuffled);
  CHECK(by_sampler.size() == 2);
  CHECK(batch_targets(by_sampler, 2) == batch_targets(by_options, 2));
  // batch_size, shuffle and drop_last belong to the batch sampler (torch's error)
  CHECK_THROWS_WITH_AS(DataLoader(ds, sampler, {.batch_size = 4}),
                       doctest::Contains("batch_sampler option is mutually exclusive"), Error);
  CHECK_THROWS_WITH_AS(DataLoader(ds, sampler, {.shuffle = true}), doctest::Contains("shuffle=1"),
                       Error);
  CHECK_THROWS_AS(DataLoader(ds, std::shared_ptr<const BatchSampler>()), Error);
  // an empty batch is the batch sampler's bug: named, not an empty tensor
  auto empty =
      std::make_shared<ListBatchSampler>(std::vector<std::vector<std::vector<int64_t>>>{{{1}, {}}});
  DataLoader bad(ds, empty);
  bad.start_epoch(0);
  Example e;
  CHECK(bad.next(e));
  CHECK_THROWS_WITH_AS(bad.next(e), doctest::Contains("returned an empty batch"), Error);
}

TEST_CASE("DataLoader collate_fn pads variable-length samples (pad_sequence)") {
  auto ds = std::make_shared<SequenceDataset>(9);
  std::atomic<int> calls{0};
  DataLoaderOptions opt{.batch_size = 4, .num_workers = 0};
  opt.collate_fn = [&calls](const std::vector<Example>& samples) {
    ++calls;
    std::vector<Tensor> seqs, targets;
    for (const Example& s : samples) {
      seqs.push_back(s.data);
      targets.push_back(s.target);
    }
    return Example{pad_sequence(seqs, /*batch_first=*/true, -1.0), stack(targets)};
  };
  for (int workers : {0, 3}) {
    CAPTURE(workers);
    calls = 0;
    opt.num_workers = workers;
    DataLoader loader(ds, opt);
    std::vector<Example> batches;
    for (Example& b : loader.epoch(0)) batches.push_back(b);
    CHECK(calls == 3);
    REQUIRE(batches.size() == 3);
    // batch 0: samples 0..3 of lengths 1..4 -> [4, 4], padded with -1 on the right
    CHECK(batches[0].data.shape() == Shape{4, 4});
    CHECK(batches[0].data.tolist<float>() ==
          std::vector<float>{0, -1, -1, -1, 1, 1, -1, -1, 2, 2, 2, -1, 3, 3, 3, 3});
    CHECK(batches[2].data.shape() == Shape{1, 1});  // sample 8 alone, length 1
    CHECK(batches[1].target.tolist<int64_t>() == std::vector<int64_t>{4, 5, 6, 7});
  }
  // data::collate as collate_fn reproduces the default batches, random transforms included
  // (the samples draw from the batch's generator in index order either way)
  auto images = std::make_shared<TransformDataset>(
      std::make_shared<TensorDataset>(testutil::random_tensor({12, 1, 6, 6}, kFloat32, 3),
                                      arange(0, 12, 1, kInt64)),
      std::make_shared<RandomCrop>(6, 2));
  DataLoaderOptions plain{.batch_size = 5, .shuffle = true, .seed = 9, .num_workers = 2};
  DataLoaderOptions with_fn = plain;
  with_fn.collate_fn = collate;
  DataLoader a(images, plain), b(images, with_fn);
  std::vector<Example> xs, ys;
  for (Example& e : a.epoch(1)) xs.push_back(e);
  for (Example& e : b.epoch(1)) ys.push_back(e);
  REQUIRE(xs.size() == ys.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    CHECK(testutil::bitwise_equal(xs[i].data, ys[i].data));
    CHECK(testutil::bitwise_equal(xs[i].target, ys[i].target));
  }
  // a throwing collate_fn is reported with the batch index, like a failing dataset
  DataLoaderOptions throwing{.batch_size = 2, .num_workers = 1};
  throwing.collate_fn = [](const std::vector<Example>& s) -> Example {
    if (s[0].target.item<int64_t>() == 2) throw Error("collate: ragged batch");
    return collate(s);
  };
  DataLoader failing(numbered(6), throwing);
  failing.start_epoch(0);
  Example e;
  CHECK(failing.next(e));
  CHECK_THROWS_WITH_AS(failing.next(e), doctest::Contains("building batch 1 of epoch 0"), Error);
}

TEST_CASE("pad_sequence matches PyTorch: batch_first, padding_value, padding_side, gradients") {
  for (const json& c : golden("pad_sequence.json")["pad_sequence"]) {
    const auto lengths = c["lengths"].get<std::vector<int64_t>>();
    const auto tail = c["tail"].get<std::vector<int64_t>>();
    const bool batch_first = c["batch_first"].get<bool>();
    const std::string side = c["side"].get<std::string>();
    INFO("lengths=", c["lengths"].dump(), " tail=", c["tail"].dump(), " side=", side,
         " batch_first=", batch_first);
    std::vector<Tensor> seqs;
    for (size_t i = 0; i < lengths.size(); ++i) {
      Shape shape{lengths[i]};
      shape.insert(shape.end(), tail.begin(), tail.end());
      Tensor s = testutil::from_f64(c["inputs"][i].get<std::vector<double>>(), shape, kFloat64);
      s.requires_grad_();
      seqs.push_back(s);
    }
    Tensor out = pad_sequence(seqs, batch_first, c["value"].get<double>(), side);
    REQUIRE(out.shape() == c["out_shape"].get<Shape>());
    check_close(out, c["out"].get<std::vector<double>>(), 0, 0);
    Tensor w = testutil::from_f64(c["w"].get<std::vector<double>>(), out.shape(), kFloat64);
    sum(mul(out, w)).backward();
    for (size_t i = 0; i < seqs.size(); ++i) {
      CAPTURE(i);
      if (lengths[i] == 0) continue;  // nothing to differentiate
      REQUIRE(seqs[i].grad().defined());
      check_close(seqs[i].grad(), c["grads"][i].get<std::vector<double>>(), 0, 0);
    }
  }
}

TEST_CASE("pad_sequence: gradcheck, dtype of the first sequence, PyTorch's errors") {
  Tensor a = testutil::random_tensor({3, 2}, kFloat64, 1),
         b = testutil::random_tensor({1, 2}, kFloat64, 2);
  a.requires_grad_();
  b.requires_grad_();
  GRADCHECK([](const std::vector<Tensor>& in) { return pad_sequence(in, false, 0.5, "left"); },
            {a, b});
  // later sequences are cast to the first one's dtype (torch copies into a buffer of that dtype)
  Tensor mixed = pad_sequence({ones({2}, kFloat32), ones({1}, kInt64)}, true);
  CHECK(mixed.dtype() == kFloat32);
  CHECK(mixed.tolist<float>() == std::vector<float>{1, 1, 1, 0});
  CHECK_THROWS_WITH_AS(pad_sequence({}), doctest::Contains("empty list of sequences"), Error);
  CHECK_THROWS_WITH_AS(pad_sequence({ones({2, 3}), ones({2, 4})}),
                       doctest::Contains("sequence 1 has shape [2, 4]"), Error);
  CHECK_THROWS_WITH_AS(pad_sequence({scalar_tensor(Scalar(1.0), kFloat32)}),
                       doctest::Contains("at least one dim"), Error);
  CHECK_THROWS_WITH_AS(pad_sequence({ones({2})}, false, 0, "middle"),
                       doctest::Contains("one of left or right"), Error);
}
