// nn::check_registration: finds the tensors a forward used that require grad but that the module
// does not register (a layer or tensor held in a member without register_module/
// register_parameter), which parameters(), state_dict(), optimizers, clone(), to() and DDP miss.
#pragma once
#include <string>
#include <unordered_set>
#include <vector>

#include "nn/module.h"

namespace minidl::nn {

// One unregistered tensor the forward reached.
struct UnregisteredTensor {
  Tensor tensor;        // the leaf (requires grad)
  std::string used_by;  // the autograd node that consumed it first, e.g. "AddmmBackward"
  // The registered parameters used just before and just after it in the forward (by the
  // creation order of their consumers), e.g. "fc1.bias" / "fc3.weight"; "" when none.
  std::string after, before;
  // "[10, 128] float32 (used by AddmmBackward after 'fc1.bias', before 'fc3.weight')"
  std::string str() const;
};

// Walks the autograd graph of `output` (a forward's result) from its grad_fn to the leaves
// (AccumulateGrad nodes) and returns every leaf that is not among module.parameters(), in the
// order the forward first used them. `inputs` are the forward's inputs: a leaf input is not
// reported, and the history of a non-leaf input (the graph built before the forward) is not
// walked. Empty when output does not require grad (e.g. under NoGradGuard). Cost: one pass over
// the graph; run it once (e.g. on a first forward), not every step.
//
//   Tensor y = net->forward(x);
//   for (auto& u : nn::check_registration(*net, y, {x})) std::cerr << u.str() << "\n";
std::vector<UnregisteredTensor> check_registration(const Module& module, const Tensor& output,
                                                   const std::vector<Tensor>& inputs = {});

// Throws minidl::Error when check_registration finds anything, naming each tensor (shape,
// dtype, where in the forward) and the fix; `context` starts the message (e.g.
// "DistributedDataParallel").
void assert_registered(const Module& module, const Tensor& output,
                       const std::vector<Tensor>& inputs = {},
                       const std::string& context = "check_registration");

// The message assert_registered throws, for `found` in the forward of `module_name`.
std::string unregistered_message(const std::string& context, const std::string& module_name,
                                 const std::vector<UnregisteredTensor>& found);

// The check optimizer.step() runs once, on its first step, for models no wrapper checks: the
// leaves the last backward reached (autograd's leaf census) that are neither registered in the
// last forward's outermost module (nn::last_root_call), nor among `optimized` (the parameters
// of every live optimizer), nor one of that forward's inputs. Those are what an unregistered
// layer's parameters look like: they get gradients that no optimizer applies. Empty when no
// forward of a shared_ptr-held module and backward were recorded; *module_name gets its name.
std::vector<UnregisteredTensor> unregistered_after_backward(
    const std::unordered_set<const TensorImpl*>& optimized, std::string* module_name);

}  // namespace minidl::nn
