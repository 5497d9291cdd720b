// SyncBatchNorm: the synchronised batch-norm op (per-rank statistics allgathered and combined in
// rank order; one autograd node whose backward allreduces two per-channel sums) and the module
// with its plain-BatchNorm fallbacks.
#include "parallel/sync_batchnorm/sync_batchnorm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/distributed.h"

namespace minidl::nn {
namespace {

// The allgathered record of one rank (f64): [C, dtype, count, mean[C], M2[C]].
constexpr int64_t kHeader = 3;

// The reduced dims of x:[N,C,*]: all but the channels.
DimList reduce_dims(const Tensor& x) {
  DimList d{0};
  for (int64_t i = 2; i < x.dim(); ++i) d.push_back(i);
  return d;
}

// [1,C,1,...]: a per-channel [C] tensor viewed to broadcast against x.
Shape channel_shape(const Tensor& x) {
  Shape s(size_t(x.dim()), 1);
  s[1] = x.size(1);
  return s;
}

// f64 computes in f64; f32, f16 and bf16 in f32.
DType acc_dtype(DType dt) {
  return dt == kFloat64 ? kFloat64 : kFloat32;
}

Tensor f64_cpu(const std::vector<double>& v) {
  Tensor t = empty({int64_t(v.size())}, kFloat64);
  std::copy(v.begin(), v.end(), t.data_ptr<double>());
  return t;
}

struct GlobalStats {
  std::vector<double> mean, var;  // var: biased (M2 / count)
  double count = 0;
};

// Combines the ranks' records in rank order with Chan et al.'s pairwise update: the same
// arithmetic on the same numbers on every rank, so all ranks get bitwise the same statistics.
// Ranks with no samples contribute nothing.
GlobalStats combine(const std::vector<Tensor>& records, const Tensor& x, int rank) {
  const int64_t C = x.size(1);
  GlobalStats g;
  g.mean.assign(size_t(C), 0.0);
  std::vector<double> m2(size_t(C), 0.0);
  for (size_t r = 0; r < records.size(); ++r) {
    const Tensor rec = records[r].to(kCPU).contiguous();
    const double* p = rec.data_ptr<double>();
    const DType dt = static_cast<DType>(uint8_t(p[1]));
    MINIDL_CHECK(p[0] == double(C) && dt == x.dtype(), "SyncBatchNorm: rank ", r, "'s input has ",
                 int64_t(p[0]), " channels of dtype ", dt, " but rank ", rank, "'s has ", C,
                 " channels of dtype ", x.dtype(), " (input shape ", x.shape_str(), ")");
    const double n = p[2];
    if (n == 0) continue;
    const double* mean_r = p + kHeader;
    const double* m2_r = mean_r + C;
    const double total = g.count + n;
    for (int64_t c = 0; c < C; ++c) {
      if (g.count == 0) {
        g.mean[size_t(c)] = mean_r[c];
        m2[size_t(c)] = m2_r[c];
        continue;
      }
      const double delta = mean_r[c] - g.mean[size_t(c)];
      g.mean[size_t(c)] += delta * (n / total);
      m2[size_t(c)] += m2_r[c] + delta * delta * (g.count * n / total);
    }
    g.count = total;
  }
  g.var.resize(size_t(C));
  for (int64_t c = 0; c < C; ++c) g.var[size_t(c)] = g.count > 0 ? m2[size_t(c)] / g.count : 0.0;
  return g;
}

// This rank's record: count, mean and M2 of its local batch (f32 accumulation for f32/f16/bf16
// inputs, f64 for f64), as one f64 tensor on x's device.
Tensor local_record(const Tensor& x) {
  NoGradGuard no_grad;
  const int64_t C = x.size(1), n = C > 0 ? x.numel() / C : 0;
  Tensor mean_r = zeros({C}, kFloat64, x.device()), m2_r = zeros({C}, kFloat64, x.device());
  if (n > 0) {
    const Tensor xa = x.detach().to(acc_dtype(x.dtype()));
    const Tensor m = mean(xa, reduce_dims(x), /*keepdim=*/true);  // [1,C,1,...]
    m2_r = sum(square(sub(xa, m)), reduce_dims(x)).to(kFloat64);
    mean_r = m.reshape({C}).to(kFloat64);
  }
  const Tensor header =
      f64_cpu({double(C), double(static_cast<uint8_t>(x.dtype())), double(n)}).to(x.device());
  return cat({header, mean_r, m2_r}, 0).contiguous();
}

// running = (1 - momentum) * running + momentum * value, in f64 on the CPU as BatchNorm's kernel
// does (the same on every rank), written back in place in the buffer's dtype and device.
void update_running(Tensor& running, const std::vector<double>& value, double momentum,
                    double unbias) {
  NoGradGuard no_grad;
  Tensor r = running.to(kCPU, kFloat64).clone();
  double* p = r.data_ptr<double>();
  for (size_t c = 0; c < value.size(); ++c)
    p[c] = (1 - momentum) * p[c] + momentum * value[c] * unbias;
  running.copy_(r);
}

// Every rank's channel count, once per layer: the statistics' allgather needs one size.
void check_channels(dist::ProcessGroup& pg, int64_t C) {
  Tensor mine = full({1}, Scalar(C), kInt64);
  std::vector<Tensor> all;
  for (int r = 0; r < pg.size(); ++r) all.push_back(empty({1}, kInt64));
  pg.allgather(all, mine)->wait();
  bool same = true;
  std::string counts;
  for (int r = 0; r < pg.size(); ++r) {
    const int64_t c = all[size_t(r)].item<int64_t>();
    same = same && c == C;
    counts += (r ? ", rank " : "rank ") + std::to_string(r) + ": " + std::to_string(c);
  }
  MINIDL_CHECK(same, "SyncBatchNorm: the ranks' layers have different channel counts (", counts,
               "); every rank must build the same model");
}

std::string py_bool(bool b) {
  return b ? "True" : "False";
}

}  // namespace

namespace functional {

// x:[N,C,*] -> y:[N,C,*]
Tensor sync_batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                       Tensor running_mean, Tensor running_var, double momentum, double eps,
                       const std::shared_ptr<dist::ProcessGroup>& pg) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::batch_norm>(x, weight, bias))
    return sync_batch_norm(ac[0], ac[1], ac[2], running_mean, running_var, momentum, eps, pg);
  MINIDL_CHECK(pg != nullptr, "sync_batch_norm: no process group");
  MINIDL_CHECK(x.defined() && x.dim() >= 2,
               "sync_batch_norm: expected input of shape [N, C] or [N, C, *], got ",
               x.defined() ? x.shape_str() : "undefined");
  MINIDL_CHECK(x.is_floating_point(), "sync_batch_norm: expected a floating input, got ", x.dtype(),
               " of shape ", x.shape_str());
  MINIDL_CHECK(running_mean.defined() == running_var.defined(),
               "sync_batch_norm: running_mean and running_var must both be defined or both not");
  const int64_t C = x.size(1);
  const int world = pg->size(), rank = pg->rank();

  // One collective: every rank's [C, dtype, count, mean, M2].
  const Tensor record = local_record(x);
  std::vector<Tensor> records;
  for (int r = 0; r < world; ++r) records.push_back(empty_like(record));
  pg->allgather(records, record)->wait();
  const GlobalStats g = combine(records, x, rank);
  MINIDL_CHECK(g.count > 1,
               "SyncBatchNorm: Expected more than 1 value per channel when training, got ",
               int64_t(g.count), " over ", world, " ranks (rank ", rank, "'s input has shape ",
               x.shape_str(), ")");

  // y = (x - mean) * invstd * w + b: BatchNorm's own kernel with the global statistics in the
  // place of running statistics (invstd = 1 / sqrt(var + eps) in f64, as in training mode).
  std::vector<double> invstd(g.var.size());
  for (size_t c = 0; c < invstd.size(); ++c) invstd[c] = 1.0 / std::sqrt(g.var[c] + eps);
  const Tensor mean_d = f64_cpu(g.mean).to(x.device()), var_d = f64_cpu(g.var).to(x.device());
  const Tensor invstd_d = f64_cpu(invstd).to(x.device());
  Tensor out = native::batch_norm(x, weight, bias, mean_d, var_d, /*training=*/false, 0.0, eps).out;
  if (running_mean.defined()) {  // after the op validated weight and bias
    update_running(running_mean, g.mean, momentum, 1.0);
    update_running(running_var, g.var, momentum, g.count / (g.count - 1));
  }

  const bool nx = x.requires_grad(), nw = weight.defined() && weight.requires_grad();
  const bool nb = bias.defined() && bias.requires_grad();
  const DType bias_dtype = bias.defined() ? bias.dtype() : x.dtype();
  const double count = g.count;
  autograd::record(
      "SyncBatchNormBackward", {x, weight, bias}, {&out}, {x, weight, mean_d, invstd_d},
      [pg, count, C, nx, nw, nb, bias_dtype](const auto& grads, const auto& s) {
        // dx = w * invstd * (dy - sum_dy / N - (x - mean) * invstd^2 * sum_dy_xmu / N) with the
        // sums and N over all ranks; dweight, dbias: this rank's sums (DDP averages them).
        NoGradGuard no_grad;
        const Tensor &x_ = s[0], &w = s[1], &mean_ = s[2], &invstd_ = s[3];
        const DType acc = acc_dtype(x_.dtype());
        const DimList dims = reduce_dims(x_);
        const Shape cs = channel_shape(x_);
        const Tensor dy = grads[0].to(acc), xmu = sub(x_.to(acc), mean_.to(acc).reshape(cs));
        const Tensor sum_dy = sum(dy, dims).to(kFloat64);                // [C]
        const Tensor sum_dy_xmu = sum(mul(dy, xmu), dims).to(kFloat64);  // [C]
        Tensor gx, gw, gb;
        if (nw) gw = mul(sum_dy_xmu, invstd_).to(w.dtype());
        if (nb) gb = sum_dy.to(bias_dtype);
        if (nx) {
          Tensor sums = cat({sum_dy, sum_dy_xmu}, 0).contiguous();  // one collective
          pg->allreduce(sums)->wait();
          const Tensor k = w.defined() ? mul(w.to(kFloat64), invstd_) : invstd_;  // [C]
          const Tensor e = neg(mul(div(sums.narrow(0, 0, C), count), k));
          const Tensor a =
              neg(mul(mul(div(sums.narrow(0, C, C), count), mul(invstd_, invstd_)), k));
          gx = add(add(mul(dy, k.to(acc).reshape(cs)), mul(xmu, a.to(acc).reshape(cs))),
                   e.to(acc).reshape(cs))
                   .to(x_.dtype());
        }
        return std::vector<Tensor>{gx, gw, gb};
      });
  return out;
}

}  // namespace functional

SyncBatchNorm::SyncBatchNorm(int64_t features, BatchNormOptions options,
                             std::shared_ptr<dist::ProcessGroup> pg)
    : process_group(std::move(pg)) {
  MINIDL_CHECK(features > 0, "SyncBatchNorm: num_features must be positive, got ", features);
  MINIDL_CHECK(options.eps >= 0, "SyncBatchNorm: eps must be non-negative, got ", options.eps);
  num_features = features;
  opt = options;
  if (opt.affine) {  // BatchNorm's names, dtypes and defaults
    weight = ones({features});
    bias = zeros({features});
    register_parameter("weight", &weight);
    register_parameter("bias", &bias);
  }
  if (opt.track_running_stats) {
    running_mean = zeros({features});
    running_var = ones({features});
    num_batches_tracked = zeros({}, kInt64);
    register_buffer("running_mean", &running_mean);
    register_buffer("running_var", &running_var);
    register_buffer("num_batches_tracked", &num_batches_tracked);
  }
}

SyncBatchNorm::SyncBatchNorm(int64_t features, double eps, double momentum, bool affine,
                             bool track_running_stats, std::shared_ptr<dist::ProcessGroup> pg)
    : SyncBatchNorm(features, BatchNormOptions{eps, momentum, affine, track_running_stats},
                    std::move(pg)) {}

std::shared_ptr<dist::ProcessGroup> SyncBatchNorm::group() const {
  return detail::sync_batchnorm_group(process_group);
}

Tensor SyncBatchNorm::forward(const Tensor& x) {
  return detail::sync_batchnorm_forward(*this, is_training(), process_group, channels_checked_, x);
}

namespace detail {

std::shared_ptr<dist::ProcessGroup> sync_batchnorm_group(
    const std::shared_ptr<dist::ProcessGroup>& process_group) {
  if (process_group) return process_group;
  return dist::is_initialized() ? dist::default_group_ptr() : nullptr;
}

// x:[N,C,*]
Tensor sync_batchnorm_forward(BatchNormState& s_, bool training,
                              const std::shared_ptr<dist::ProcessGroup>& process_group,
                              bool& channels_checked, const Tensor& x) {
  MINIDL_CHECK(x.defined(), "SyncBatchNorm: undefined input");
  MINIDL_CHECK(x.dim() >= 2, "SyncBatchNorm: expected at least 2D input [N, C, *], got shape ",
               x.shape_str());
  MINIDL_CHECK(x.size(1) == s_.num_features, "SyncBatchNorm: expected ", s_.num_features,
               " channels (dim 1), got input of shape ", x.shape_str());
  double momentum = s_.opt.momentum.value_or(0.0);
  if (training && s_.opt.track_running_stats) {  // as BatchNorm
    {
      NoGradGuard guard;
      add_(s_.num_batches_tracked, Scalar(1));
    }
    if (!s_.opt.momentum) momentum = 1.0 / double(s_.num_batches_tracked.item<int64_t>());
  }
  // Only training synchronises (as torch: eval uses the running stats, or the local batch when
  // there are none). Inside a DataParallel replica the statistics stay the replica's: the
  // replicas are threads of one process, not ranks of a group, and DataParallel tells them so
  // through a thread-local flag it sets around each replica's forward (a flag on the replica
  // modules would also mark the source module, which is replica 0 and usable outside DP).
  // torch.nn.DataParallel does not synchronise BatchNorm either.
  const std::shared_ptr<dist::ProcessGroup> pg =
      training && !dist::in_data_parallel_replica() ? sync_batchnorm_group(process_group) : nullptr;
  if (!pg || pg->size() == 1) {  // plain BatchNorm: the same op and arguments
    const bool use_batch_stats = training || !s_.opt.track_running_stats;
    return batch_norm(x, s_.weight, s_.bias, s_.running_mean, s_.running_var, use_batch_stats,
                      momentum, s_.opt.eps)
        .out;
  }
  if (!channels_checked) {
    check_channels(*pg, s_.num_features);
    channels_checked = true;
  }
  return functional::sync_batch_norm(x, s_.weight, s_.bias, s_.running_mean, s_.running_var,
                                     momentum, s_.opt.eps, pg);
}

std::string sync_batchnorm_repr(const BatchNormState& s_) {
  return std::to_string(s_.num_features) + ", eps=" + py_float(s_.opt.eps) +
         ", momentum=" + (s_.opt.momentum ? py_float(*s_.opt.momentum) : std::string("None")) +
         ", affine=" + py_bool(s_.opt.affine) +
         ", track_running_stats=" + py_bool(s_.opt.track_running_stats);
}

}  // namespace detail

std::string SyncBatchNorm::extra_repr() const {
  return detail::sync_batchnorm_repr(*this);
}

}  // namespace minidl::nn
