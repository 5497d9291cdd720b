// optim/fused.h in a build without CUDA: nothing is usable (the optimizers take their
// per-tensor path); the step functions throw if called anyway.
#include "optim/fused.h"

#include "tensor/error.h"

#ifndef MINIDL_WITH_CUDA
namespace minidl::optim::fused {

struct Hyper {
  std::function<HyperValues()> read;
};

HyperHandle make_hyper(std::function<HyperValues()> read) {
  auto h = std::make_shared<Hyper>();
  h->read = std::move(read);
  return h;
}

bool usable(const std::vector<Tensor>&) {
  return false;
}

void sgd_step(const HyperHandle&, bool, const std::vector<Tensor>&, const std::vector<Tensor>&,
              const std::vector<Tensor>&, const std::vector<uint8_t>&) {
  MINIDL_FAIL("fused sgd_step: minidl was built without CUDA");
}

void adam_step(const HyperHandle&, bool, const std::vector<Tensor>&, const std::vector<Tensor>&,
               const std::vector<Tensor>&, const std::vector<Tensor>&, const std::vector<Tensor>&,
               const std::vector<Tensor>&) {
  MINIDL_FAIL("fused adam_step: minidl was built without CUDA");
}

}  // namespace minidl::optim::fused
#endif
