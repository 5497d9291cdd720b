// checkpoint(): a no-grad forward plus one FunctionNode whose backward recomputes fn under the
// forward's RNG and autocast state and runs backward_capture through the recomputed graph.
#include "autograd/checkpoint.h"

#include <memory>

#include "autograd/autocast.h"
#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "tensor/random.h"

namespace minidl::autograd {

namespace {

// Puts the default generator back to the state it had when constructed.
struct GeneratorRestore {
  Generator& gen = default_generator();
  uint64_t seed = gen.seed(), offset = gen.offset();
  ~GeneratorRestore() { gen.set_state(seed, offset); }
};

}  // namespace

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               const std::vector<Tensor>& params, bool preserve_rng_state) {
  MINIDL_CHECK(fn != nullptr, "checkpoint: empty function");
  const uint64_t seed = default_generator().seed(), offset = default_generator().offset();
  const amp::AutocastState autocast = amp::autocast_state();
  std::vector<Tensor> outs;
  {
    NoGradGuard no_grad;
    outs = fn(inputs);
  }
  std::vector<Tensor> node_inputs = inputs;
  node_inputs.insert(node_inputs.end(), params.begin(), params.end());
  bool needed = GradMode::is_enabled();
  bool any = false;
  for (const Tensor& t : node_inputs) any = any || (t.defined() && t.requires_grad());
  if (!needed || !any) return outs;
  // Outputs get fresh TensorImpls (fn may return an input or a view of one); only floating
  // outputs take part in autograd.
  std::vector<Tensor*> recorded;
  std::vector<size_t> recorded_index;
  for (size_t k = 0; k < outs.size(); ++k) {
    if (!outs[k].defined()) continue;
    outs[k] = outs[k].detach();
    if (outs[k].is_floating_point()) {
      recorded.push_back(&outs[k]);
      recorded_index.push_back(k);
    }
  }
  if (recorded.empty()) return outs;
  std::vector<bool> input_grad(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    input_grad[i] = inputs[i].defined() && inputs[i].requires_grad();
  auto backward = [fn, params, input_grad, recorded_index, seed, offset, autocast,
                   preserve_rng_state](const std::vector<Tensor>& grads,
                                       const std::vector<Tensor>& saved) {
    std::vector<Tensor> xs(saved.size());
    std::vector<Tensor> wanted;  // leaves whose gradients this node returns
    std::vector<size_t> wanted_slot;
    for (size_t i = 0; i < saved.size(); ++i) {
      if (!saved[i].defined()) continue;
      xs[i] = saved[i].detach();
      if (input_grad[i]) {
        xs[i].requires_grad_();
        wanted.push_back(xs[i]);
        wanted_slot.push_back(i);
      }
    }
    for (size_t j = 0; j < params.size(); ++j)
      if (params[j].defined() && params[j].requires_grad()) {
        wanted.push_back(params[j]);
        wanted_slot.push_back(saved.size() + j);
      }
    std::vector<Tensor> recomputed;
    {
      std::unique_ptr<GeneratorRestore> restore;
      if (preserve_rng_state) {
        restore = std::make_unique<GeneratorRestore>();
        default_generator().set_state(seed, offset);
      }
      amp::AutocastStateGuard forward_autocast(autocast);
      AutoGradMode grad_on(true);
      recomputed = fn(xs);
    }
    MINIDL_CHECK(recomputed.size() > recorded_index.back(), "checkpoint: the recomputation ",
                 "returned ", recomputed.size(), " outputs, the forward more");
    std::vector<Tensor> roots, root_grads;
    for (size_t r = 0; r < recorded_index.size(); ++r) {
      const Tensor& o = recomputed[recorded_index[r]];
      if (!grads[r].defined() || !o.defined() || !o.requires_grad()) continue;
      MINIDL_CHECK(o.shape() == grads[r].shape(), "checkpoint: recomputed output ",
                   recorded_index[r], " has shape ", o.shape_str(), ", the forward's ",
                   grads[r].shape_str());
      roots.push_back(o);
      root_grads.push_back(grads[r]);
    }
    std::vector<Tensor> result(saved.size() + params.size());
    if (roots.empty() || wanted.empty()) {
      if (!roots.empty()) run_backward(roots, root_grads, false);
      return result;
    }
    std::vector<Tensor> got = backward_capture(roots, root_grads, wanted);
    for (size_t w = 0; w < wanted.size(); ++w) result[wanted_slot[w]] = got[w];
    return result;
  };
  record("CheckpointBackward", node_inputs, recorded, inputs, std::move(backward));
  return outs;
}

}  // namespace minidl::autograd
