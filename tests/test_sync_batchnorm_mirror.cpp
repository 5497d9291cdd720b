// nn::SyncBatchNorm in one process over a "mirror" group that plays W identical ranks (allgather
// repeats this rank's record, allreduce multiplies by W): the result must equal BatchNorm on the
// batch repeated W times. Counts the collectives (one per forward, one per backward), and runs
// on CUDA tensors too (suite cuda_sync_batchnorm, skipped without a GPU).
#include <doctest/doctest.h>

#include "parallel/sync_batchnorm/sync_batchnorm.h"
#include "test_util.h"

using namespace minidl;

namespace {

struct DoneWork : dist::Work {
  explicit DoneWork(uint64_t seq) : seq_(seq) {}
  void wait() override {}
  bool is_completed() override { return true; }
  uint64_t sequence_number() const override { return seq_; }
  uint64_t seq_;
};

// W ranks that all hold this process's tensors.
class MirrorGroup : public dist::ProcessGroup {
 public:
  explicit MirrorGroup(int world) : world_(world) {}
  int rank() const override { return 0; }
  int size() const override { return world_; }
  std::string backend() const override { return "mirror"; }
  uint64_t sequence_number() const override { return seq_; }
  dist::CollectiveCounts collective_counts() const override { return {seq_, 0}; }
  std::shared_ptr<dist::Work> allreduce(Tensor& t, dist::ReduceOp op) override {
    REQUIRE(op == dist::ReduceOp::sum);
    NoGradGuard no_grad;
    mul_(t, Scalar(world_));
    return done();
  }
  std::shared_ptr<dist::Work> broadcast(Tensor&, int) override { return done(); }
  std::shared_ptr<dist::Work> allgather(std::vector<Tensor>& outs, const Tensor& in) override {
    NoGradGuard no_grad;
    for (Tensor& o : outs) o.copy_(in);
    ++allgathers;
    return done();
  }
  std::shared_ptr<dist::Work> reduce_scatter(Tensor&, const std::vector<Tensor>&,
                                             dist::ReduceOp) override {
    FAIL("reduce_scatter");
    return done();
  }
  std::shared_ptr<dist::Work> gather(std::vector<Tensor>&, const Tensor&, int) override {
    FAIL("gather");
    return done();
  }
  std::shared_ptr<dist::Work> barrier() override { return done(); }
  int allgathers = 0;

 private:
  std::shared_ptr<dist::Work> done() { return std::make_shared<DoneWork>(++seq_); }
  int world_;
  uint64_t seq_ = 0;
};

double rel_err(const Tensor& a, const Tensor& b) {
  Tensor x = a.detach().to(kCPU, kFloat64), y = b.detach().to(kCPU, kFloat64);
  return max(abs(sub(x, y))).item<double>() / std::max(max(abs(y)).item<double>(), 1e-300);
}

// Two training steps of SyncBatchNorm over a mirror group of `world` on `dev` against
// BatchNorm2d on the batch repeated `world` times; returns the largest relative error.
double mirror_error(int world, DType dt, Device dev) {
  auto pg = std::make_shared<MirrorGroup>(world);
  auto sbn = std::make_shared<nn::SyncBatchNorm>(3, nn::BatchNormOptions{}, pg);
  nn::BatchNorm2d bn(3);
  const DType pd = dt == kFloat64 ? kFloat64 : kFloat32;  // parameters: f32 under bf16 (AMP O2)
  sbn->to(dev, pd);
  bn.to(dev, pd);
  double err = 0;
  for (int s = 0; s < 2; ++s) {
    const uint64_t seq = pg->sequence_number();
    const Tensor x = testutil::random_tensor({3, 3, 2, 2}, dt, 10 + uint64_t(s), -1, 3).to(dev);
    const Tensor G = testutil::random_tensor({3, 3, 2, 2}, dt, 20 + uint64_t(s)).to(dev);
    Tensor xs = x.clone(), xb = cat(std::vector<Tensor>(size_t(world), x), 0);
    xs.requires_grad_();
    xb.requires_grad_();
    const Tensor ys = sbn->forward(xs), yb = bn.forward(xb);
    sum(mul(ys, G)).backward();
    sum(mul(yb, cat(std::vector<Tensor>(size_t(world), G), 0))).backward();
    // the channel check once, then one allgather forward and one allreduce backward
    CHECK(pg->sequence_number() - seq == (s == 0 ? 3u : 2u));
    err = std::max(err, rel_err(ys, yb.narrow(0, 0, 3)));
    err = std::max(err, rel_err(xs.grad(), xb.grad().narrow(0, 0, 3)));
    auto ps = sbn->parameters(), pb = bn.parameters();
    for (size_t j = 0; j < 2; ++j)  // local grads: 1/world of the repeated batch's
      err = std::max(err, rel_err(mul(ps[j].grad(), Scalar(world)), pb[j].grad()));
    sbn->zero_grad();
    bn.zero_grad();
  }
  err = std::max(err, rel_err(sbn->buffers()[0], bn.buffers()[0]));
  err = std::max(err, rel_err(sbn->buffers()[1], bn.buffers()[1]));
  CHECK(pg->allgathers == 3);
  return err;
}

}  // namespace

TEST_SUITE("sync_batchnorm") {
  TEST_CASE("sync_batchnorm: a mirror group of W ranks equals BatchNorm on W copies") {
    for (int world : {2, 3}) {
      CAPTURE(world);
      CHECK(mirror_error(world, kFloat64, kCPU) <= 1e-12);
      CHECK(mirror_error(world, kFloat32, kCPU) <= 1e-5);
    }
  }
}

TEST_SUITE("cuda_sync_batchnorm") {
  TEST_CASE("cuda_sync_batchnorm: a mirror group on CUDA tensors equals BatchNorm on W copies") {
    for (DType dt : {kFloat64, kFloat32, kBFloat16}) {
      CAPTURE(dt);
      const double e = mirror_error(2, dt, kCUDA);
      MESSAGE("max rel error ", e);
      CHECK(e <= (dt == kFloat64 ? 1e-12 : dt == kFloat32 ? 1e-5 : 1e-2));
    }
  }
}
