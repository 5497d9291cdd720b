// nn::checkpoint overloads over autograd::checkpoint.
#include "nn/checkpoint.h"

namespace minidl::nn {

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x,
                  const std::vector<Tensor>& params, bool preserve_rng_state) {
  auto f = [fn](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in[0])}; };
  return autograd::checkpoint(f, {x}, params, preserve_rng_state)[0];
}

Tensor checkpoint(Module& module, const Tensor& x, bool preserve_rng_state) {
  Module* m = &module;
  auto f = [m](const std::vector<Tensor>& in) { return std::vector<Tensor>{m->forward(in[0])}; };
  return autograd::checkpoint(f, {x}, module.parameters(), preserve_rng_state)[0];
}

}  // namespace minidl::nn
