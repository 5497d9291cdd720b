// DDP communication hooks: GradBucket views, CommFuture's deferred steps, the allreduce and
// fp16/bf16 compression hooks, and the command-line spec parser (PowerSGD is in powersgd.cpp).
#include "parallel/ddp/comm_hooks.h"

#include <utility>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace minidl::dist {

std::vector<Tensor> GradBucket::gradients() const {
  std::vector<Tensor> out;
  for (size_t k = 0; k < parameters_.size(); ++k)
    out.push_back(
        buffer_.narrow(0, offsets_[k], parameters_[k].numel()).view(parameters_[k].shape()));
  return out;
}

CommFuture CommFuture::then(std::function<Tensor(Tensor)> step) && {
  steps_.push_back(std::move(step));
  return std::move(*this);
}

Tensor CommFuture::wait() {
  if (work_) {
    work_->wait();
    work_.reset();
  }
  NoGradGuard no_grad;
  for (auto& step : steps_) value_ = step(std::move(value_));
  steps_.clear();
  return value_;
}

CommHook allreduce_hook() {
  return [](GradBucket& bucket) {
    NoGradGuard no_grad;
    ProcessGroup& g = bucket.process_group();
    Tensor& buffer = bucket.buffer();
    mul_(buffer, 1.0 / g.size());  // as the Reducer's own path: the same bits
    return CommFuture(g.allreduce(buffer, ReduceOp::sum), buffer);
  };
}

namespace {

CommHook compress_hook(DType wire) {
  return [wire](GradBucket& bucket) {
    NoGradGuard no_grad;
    ProcessGroup& g = bucket.process_group();
    Tensor buffer = bucket.buffer();
    Tensor compressed = buffer.to(wire);
    if (compressed.data_ptr() == buffer.data_ptr()) compressed = buffer.clone();
    mul_(compressed, 1.0 / g.size());
    return CommFuture(g.allreduce(compressed, ReduceOp::sum), compressed)
        .then([buffer](Tensor reduced) mutable {
          buffer.copy_(reduced);  // decompress into the bucket
          return buffer;
        });
  };
}

}  // namespace

CommHook fp16_compress_hook() {
  return compress_hook(kFloat16);
}
CommHook bf16_compress_hook() {
  return compress_hook(kBFloat16);
}

CommHook make_comm_hook(const std::string& spec) {
  if (spec == "allreduce") return allreduce_hook();
  if (spec == "fp16") return fp16_compress_hook();
  if (spec == "bf16") return bf16_compress_hook();
  const std::string prefix = "powersgd:";
  if (spec.rfind(prefix, 0) == 0) {
    PowerSGDOptions o;
    const std::string rest = spec.substr(prefix.size());
    const size_t colon = rest.find(':');
    auto number = [&](const std::string& s, const char* what) {
      size_t used = 0;
      long long v = -1;
      try {
        v = std::stoll(s, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      MINIDL_CHECK(used == s.size() && !s.empty() && v >= 1, "comm hook '", spec, "': ", what,
                   " must be a positive integer, got '", s, "'");
      return v;
    };
    o.matrix_approximation_rank = int(number(rest.substr(0, colon), "the rank R"));
    if (colon != std::string::npos)
      o.start_powerSGD_iter = number(rest.substr(colon + 1), "the start iteration");
    return powersgd_hook(o);
  }
  MINIDL_FAIL("unknown comm hook '", spec,
              "': expected allreduce, fp16, bf16, powersgd:R or powersgd:R:START");
}

}  // namespace minidl::dist
