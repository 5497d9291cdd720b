// nn::Module's call path: forward_inputs (several tensor inputs), forward pre-hooks and hooks
// run by operator(), removable hook handles, and apply(fn) over the module tree.
#include "nn/module.h"

namespace minidl::nn {

Tensor Module::forward_inputs(const std::vector<Tensor>& inputs) {
  MINIDL_CHECK(inputs.size() == 1, name(), ": forward called with ", inputs.size(),
               " tensors, but this module takes one (derive from nn::Cloneable<", name(),
               "> and define forward(const Tensor&, ...) with that many tensors, or override "
               "forward_inputs)");
  return forward(inputs[0]);
}

Tensor Module::call(std::vector<Tensor> inputs) {
  if (hooks_ == nullptr) return inputs.size() == 1 ? forward(inputs[0]) : forward_inputs(inputs);
  // Copies: a hook may register or remove hooks while it runs.
  const auto pre = hooks_->pre;
  for (const auto& [id, hook] : pre)
    if (auto replaced = hook(*this, inputs)) inputs = std::move(*replaced);
  Tensor out = inputs.size() == 1 ? forward(inputs[0]) : forward_inputs(inputs);
  const auto post = hooks_->post;
  for (const auto& [id, hook] : post)
    if (auto replaced = hook(*this, inputs, out)) out = std::move(*replaced);
  return out;
}

Module::RemovableHandle Module::register_forward_pre_hook(ForwardPreHook hook) {
  MINIDL_CHECK(hook != nullptr, name(), ": register_forward_pre_hook got an empty function");
  if (!hooks_) hooks_ = std::make_shared<RemovableHandle::Hooks>();
  const uint64_t id = hooks_->next_id++;
  hooks_->pre.emplace_back(id, std::move(hook));
  return RemovableHandle(hooks_, id);
}

Module::RemovableHandle Module::register_forward_hook(ForwardHook hook) {
  MINIDL_CHECK(hook != nullptr, name(), ": register_forward_hook got an empty function");
  if (!hooks_) hooks_ = std::make_shared<RemovableHandle::Hooks>();
  const uint64_t id = hooks_->next_id++;
  hooks_->post.emplace_back(id, std::move(hook));
  return RemovableHandle(hooks_, id);
}

void Module::RemovableHandle::remove() {
  auto hooks = hooks_.lock();
  if (!hooks) return;  // the module is gone, or its hooks were never copied here
  std::erase_if(hooks->pre, [&](const auto& e) { return e.first == id_; });
  std::erase_if(hooks->post, [&](const auto& e) { return e.first == id_; });
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  for (const auto& child : children()) child->apply(fn);
  fn(*this);
  return *this;
}

}  // namespace minidl::nn
