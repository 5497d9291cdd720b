// Fuzz target of the training-checkpoint loader: load_checkpoint into a small model + Adam +
// StepLR, strict and lenient. A rejected file must leave the model unchanged; an accepted one
// must survive a training step.
#include <cstring>
#include <stdexcept>

#include "autograd/grad_mode.h"
#include "fuzz_targets.h"
#include "nn/checkpoint.h"
#include "tensor/error.h"

namespace minidl::fuzz {
namespace {

using TensorMap = std::map<std::string, Tensor>;

TensorMap copy_state(const TensorMap& sd) {
  NoGradGuard guard;
  TensorMap out;
  for (const auto& [k, v] : sd) out[k] = v.detach().clone();
  return out;
}

bool bitwise_same(const TensorMap& a, const TensorMap& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    if (it == b.end() || it->second.shape() != v.shape() || it->second.dtype() != v.dtype())
      return false;
    Tensor x = v.contiguous(), y = it->second.contiguous();
    if (x.nbytes() > 0 && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) != 0) return false;
  }
  return true;
}

void load_and_step(const std::string& path, bool strict) {
  CheckpointTarget t;
  const TensorMap before = copy_state(t.model->state_dict());
  const TensorMap opt_before = copy_state(t.opt->state_dict());
  TensorMap amp;
  try {
    nn::load_checkpoint(path, *t.model, t.opt.get(), t.sched.get(), strict, &amp);
  } catch (const Error&) {
    if (!bitwise_same(before, t.model->state_dict()) ||
        !bitwise_same(opt_before, t.opt->state_dict()))
      throw std::logic_error("fuzz_checkpoint: a failed load changed the model or optimizer");
    return;
  }
  try {
    t.train_step();
  } catch (const Error&) {
  }
}

}  // namespace

int fuzz_checkpoint(const uint8_t* data, size_t size) {
  const std::string path = write_scratch("fuzz-checkpoint.safetensors", data, size);
  load_and_step(path, /*strict=*/true);
  load_and_step(path, /*strict=*/false);
  return 0;
}

}  // namespace minidl::fuzz
