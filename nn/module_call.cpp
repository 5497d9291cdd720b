// nn::Module's call path: forward_inputs (several tensor inputs), forward pre-hooks and hooks
// run by operator(), removable hook handles, and apply(fn) over the module tree.
#include "nn/module.h"

#include <mutex>

#include "autograd/engine.h"

namespace minidl::nn {

Tensor Module::forward_inputs(const std::vector<Tensor>& inputs) {
  MINIDL_CHECK(inputs.size() == 1, name(), ": forward called with ", inputs.size(),
               " tensors, but this module takes one (derive from nn::Cloneable<", name(),
               "> and define forward(const Tensor&, ...) with that many tensors, or override "
               "forward_inputs)");
  return forward(inputs[0]);
}

namespace {
thread_local int t_call_depth = 0;
std::mutex g_root_mutex;
RootCall g_root;

// Records the outermost call of a forward (only while an optimizer awaits its first step).
class RootScope {
 public:
  RootScope(const Module& m, const Tensor* inputs, size_t n) {
    if (t_call_depth++ > 0 || !autograd::leaf_census_armed()) return;
    RootCall r{m.weak_from_this(), {}};
    for (size_t i = 0; i < n; ++i)
      if (inputs[i].defined()) r.inputs.push_back(inputs[i].impl_ptr());
    std::lock_guard<std::mutex> lock(g_root_mutex);
    g_root = std::move(r);
  }
  ~RootScope() { --t_call_depth; }
  RootScope(const RootScope&) = delete;
  RootScope& operator=(const RootScope&) = delete;
};
}  // namespace

RootCall last_root_call() {
  std::lock_guard<std::mutex> lock(g_root_mutex);
  return g_root;
}

Tensor Module::operator()(const Tensor& x) {
  if (hooks_ != nullptr) return call({x});
  RootScope scope(*this, &x, 1);
  return forward(x);
}

Tensor Module::call(std::vector<Tensor> inputs) {
  RootScope scope(*this, inputs.data(), inputs.size());
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

bool Module::has_forward_hooks() const {
  return hooks_ != nullptr && (!hooks_->pre.empty() || !hooks_->post.empty());
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
