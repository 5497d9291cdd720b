// Recording a differentiable function: after computing outputs with raw tensor ops, attach a
// FunctionNode whose backward closure maps output gradients to input gradients.
//   Tensor y = raw_op(x);
//   record("ExpBackward", {x}, {&y}, {y},
//          [](const auto& g, const auto& s) { return std::vector<Tensor>{mul(g[0], s[0])}; });
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/node.h"

namespace minidl::autograd {

// Attaches history to `outputs` when grad mode is on and any input requires grad; `saved`
// tensors are version-checked when the backward runs. Returns whether history was recorded.
inline bool record(std::string name, const std::vector<Tensor>& inputs,
                   const std::vector<Tensor*>& outputs, const std::vector<Tensor>& saved,
                   FunctionNode::BackwardFn backward) {
  if (!GradMode::is_enabled()) return false;
  bool needed = false;
  for (const Tensor& t : inputs) needed = needed || (t.defined() && t.requires_grad());
  if (!needed) return false;
  std::vector<SavedTensor> s;
  s.reserve(saved.size());
  for (const Tensor& t : saved) s.emplace_back(t);
  auto node = std::make_shared<FunctionNode>(std::move(name), std::move(backward), std::move(s));
  set_history(inputs, node, outputs);
  return true;
}

// In-place writes in grad mode: a leaf that requires grad is refused (as in PyTorch); a self
// with history, or an operand that requires grad (self would need new history), are refused
// as a documented limitation. Under NoGradGuard everything is allowed (optimizers, loading).
void check_inplace(std::string_view op, const Tensor& self, const Tensor& other = {});

}  // namespace minidl::autograd
