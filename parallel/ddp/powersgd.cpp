// PowerSGD gradient compression for DDP (PyTorch's powerSGD_hook): per bucket, rank-r factors
// P = M Q and Q = M^T P of each large gradient matrix M are allreduced instead of M, with
// error feedback, warm-started Qs and a plain allreduce for the first start_powerSGD_iter steps.
#include <algorithm>
#include <cfloat>
#include <map>
#include <memory>
#include <utility>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "parallel/ddp/comm_hooks.h"
#include "tensor/random.h"

namespace minidl::dist {
namespace {

struct PowerSGDState {
  explicit PowerSGDState(PowerSGDOptions o) : opt(o), rng(o.random_seed) {}
  PowerSGDOptions opt;
  int64_t iter = 0;  // synchronised steps seen (counted at each step's last bucket)
  std::map<size_t, Tensor> error, p_memory, q_memory;  // by bucket index
  Generator rng;                                       // the initial Qs, the same on all ranks
};

// Gram-Schmidt over the columns of m:[n, r], in place. A zero column stays zero (PyTorch would
// turn it into NaNs unless orthogonalization_epsilon > 0).
void orthogonalize(Tensor m, double eps) {
  const int64_t r = m.shape()[1];
  const double tiny = m.dtype() == kFloat64 ? DBL_MIN : FLT_MIN;
  for (int64_t i = 0; i < r; ++i) {
    Tensor col = m.narrow(1, i, 1);  // [n, 1]
    Tensor norm = sqrt(sum(mul(col, col), {0}, true));
    if (eps > 0) add_(norm, eps);
    clamp_(norm, tiny, std::nullopt);
    div_(col, norm);
    if (i + 1 < r) {
      Tensor rest = m.narrow(1, i + 1, r - i - 1);  // [n, r-i-1]
      sub_(rest, mul(sum(mul(col, rest), {0}, true), col));
    }
  }
}

// One compressed matrix of a bucket: M [n, m] (a view of the bucket), its P [n, r] and Q [m, r]
// (views of the bucket's P and Q memories).
struct Factor {
  Tensor M, P, Q;
};

CommFuture powersgd_step(const std::shared_ptr<PowerSGDState>& st, GradBucket& bucket) {
  NoGradGuard no_grad;
  const PowerSGDOptions& o = st->opt;
  ProcessGroup& g = bucket.process_group();
  const double inv_world = 1.0 / g.size();
  Tensor input = bucket.buffer();  // [numel]
  if (st->iter < o.start_powerSGD_iter) {
    if (bucket.is_last()) ++st->iter;
    mul_(input, inv_world);
    return CommFuture(g.allreduce(input, ReduceOp::sum), input);
  }
  const size_t bi = bucket.index();
  Tensor input_copy;
  if (o.use_error_feedback) {
    auto it = st->error.find(bi);
    if (it != st->error.end() && it->second.numel() == input.numel())
      add_(input, it->second);
    else
      st->error[bi] = zeros_like(input);
    input_copy = input.clone();
  }

  // Split: vectors and matrices not worth compressing go plainly, the rest as factors.
  std::vector<Tensor> plain;
  std::vector<Factor> factors;
  std::vector<int64_t> ranks;
  int64_t p_size = 0, q_size = 0;
  for (Tensor& t : bucket.gradients()) {
    if (t.dim() <= 1) {
      plain.push_back(t);
      continue;
    }
    const int64_t n = t.shape()[0], m = t.numel() / n;
    const int64_t r = std::min<int64_t>({n, m, int64_t(o.matrix_approximation_rank)});
    if (double(n + m) * double(r) * o.min_compression_rate < double(n * m)) {
      factors.push_back({t.view({n, m}), {}, {}});
      ranks.push_back(r);
      p_size += n * r;
      q_size += m * r;
    } else {
      plain.push_back(t);
    }
  }
  Tensor plain_flat;
  if (!plain.empty()) {
    std::vector<Tensor> parts;
    for (const Tensor& t : plain) parts.push_back(t.reshape({-1}));
    plain_flat = cat(parts, 0);
  }

  Tensor& p_mem = st->p_memory[bi];
  Tensor& q_mem = st->q_memory[bi];
  const bool fresh =
      !o.warm_start || !p_mem.defined() || p_mem.numel() != p_size || q_mem.numel() != q_size;
  if (fresh) {
    p_mem = empty({p_size}, input.dtype(), input.device());
    q_mem = empty({q_size}, input.dtype(), input.device());
  }
  int64_t po = 0, qo = 0;
  for (size_t k = 0; k < factors.size(); ++k) {
    const int64_t n = factors[k].M.shape()[0], m = factors[k].M.shape()[1], r = ranks[k];
    factors[k].P = p_mem.narrow(0, po, n * r).view({n, r});
    factors[k].Q = q_mem.narrow(0, qo, m * r).view({m, r});
    po += n * r;
    qo += m * r;
    if (fresh) {
      factors[k].Q.copy_(randn({m, r}, kFloat32, kCPU, &st->rng));
      orthogonalize(factors[k].Q, o.orthogonalization_epsilon);
    }
    factors[k].P.copy_(mm(factors[k].M, factors[k].Q));  // P = M Q
  }

  std::shared_ptr<Work> plain_work;
  if (plain_flat.defined()) plain_work = g.allreduce(plain_flat, ReduceOp::sum);
  Tensor p_all = p_mem, q_all = q_mem;
  std::shared_ptr<Work> p_work = g.allreduce(p_all, ReduceOp::sum);
  return CommFuture(p_work, input)
      .then([st, plain, plain_flat, plain_work, factors, p_all, q_all, input, input_copy, bi,
             inv_world, &g, is_last = bucket.is_last()](Tensor) mutable {
        if (plain_work) {
          plain_work->wait();
          mul_(plain_flat, inv_world);
          int64_t off = 0;
          for (Tensor& t : plain) {
            t.copy_(plain_flat.narrow(0, off, t.numel()).view(t.shape()));
            off += t.numel();
          }
        }
        for (Factor& f : factors) {
          orthogonalize(f.P, st->opt.orthogonalization_epsilon);
          f.Q.copy_(mm(f.M.t(), f.P));  // Q = M^T P
        }
        if (!factors.empty()) g.allreduce(q_all, ReduceOp::sum)->wait();
        mul_(q_all, inv_world);
        for (Factor& f : factors) f.M.copy_(mm(f.P, f.Q.t()));  // M ~ P Q^T, the mean
        if (st->opt.use_error_feedback) st->error[bi] = sub(input_copy, input);
        if (!st->opt.warm_start) {
          st->p_memory.erase(bi);
          st->q_memory.erase(bi);
        }
        if (is_last) ++st->iter;  // once per step, at its last bucket
        return input;
      });
}

}  // namespace

CommHook powersgd_hook(PowerSGDOptions options) {
  MINIDL_CHECK(options.matrix_approximation_rank >= 1,
               "powersgd_hook: matrix_approximation_rank must be >= 1, got ",
               options.matrix_approximation_rank);
  MINIDL_CHECK(options.min_compression_rate > 0, "powersgd_hook: min_compression_rate must be > 0");
  MINIDL_CHECK(
      options.start_powerSGD_iter >= 2 || (!options.use_error_feedback && !options.warm_start),
      "powersgd_hook: start_powerSGD_iter must be >= 2 with error feedback or warm "
      "start (DDP settles its bucket layout after the first step), got ",
      options.start_powerSGD_iter);
  auto state = std::make_shared<PowerSGDState>(options);
  return [state](GradBucket& bucket) { return powersgd_step(state, bucket); };
}

}  // namespace minidl::dist
