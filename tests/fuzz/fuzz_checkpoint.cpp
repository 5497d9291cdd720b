// Fuzz target of the training-checkpoint loader: load_checkpoint into a small model + Adam +
// StepLR, strict and lenient. A rejected file must leave the model, optimizer and scheduler
// unchanged; an accepted one must survive a training step.
#include <cstring>
#include <stdexcept>

#include "autograd/grad_mode.h"
#include "fuzz_targets.h"
#include "optim/checkpoint.h"
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

// The first key whose tensor differs between a and b (bitwise), or "" when they are equal.
std::string first_difference(const TensorMap& a, const TensorMap& b) {
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    if (it == b.end()) return k + " (missing after the load)";
    if (it->second.shape() != v.shape() || it->second.dtype() != v.dtype()) return k;
    Tensor x = v.contiguous(), y = it->second.contiguous();
    if (x.nbytes() > 0 && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) != 0) return k;
  }
  for (const auto& [k, v] : b)
    if (!a.count(k)) return k + " (added by the load)";
  return "";
}

void load_and_step(const std::string& path, bool strict) {
  CheckpointTarget t;
  const TensorMap before = copy_state(t.model->state_dict());
  const TensorMap opt_before = copy_state(t.opt->state_dict());
  const TensorMap sched_before = copy_state(t.sched->state_dict());
  TensorMap amp;
  try {
    nn::load_checkpoint(path, *t.model, t.opt.get(), t.sched.get(), strict, &amp);
  } catch (const Error&) {
    std::string diff = first_difference(before, t.model->state_dict());
    if (diff.empty()) diff = first_difference(opt_before, t.opt->state_dict());
    if (diff.empty()) diff = first_difference(sched_before, t.sched->state_dict());
    if (!diff.empty())
      throw std::logic_error("fuzz_checkpoint: a failed load changed `" + diff + "`");
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
