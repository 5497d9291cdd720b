// Autograd state on Tensor: requires_grad, grad, grad_fn, backward, detach, hooks; grad mode;
// graph construction helpers (gradient_edge, set_history); Node/SavedTensor/AccumulateGrad.
#include <atomic>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/ops.h"

namespace minidl {
namespace {
thread_local bool t_grad_enabled = true;
std::atomic<uint64_t> g_next_sequence_nr{0};
const std::shared_ptr<Node> kNoNode;
const Tensor kUndefined;
}  // namespace

bool GradMode::is_enabled() {
  return t_grad_enabled;
}
void GradMode::set_enabled(bool enabled) {
  t_grad_enabled = enabled;
}

Node::Node() : sequence_nr(g_next_sequence_nr++) {}

const Tensor& SavedTensor::unpack(const Node& node) const {
  MINIDL_CHECK(!released_, "backward: trying to backward through the graph a second time (",
               node.name(),
               " already freed its saved tensors); specify retain_graph=true on "
               "the first backward if you need to backward twice");
  if (tensor_.defined())
    MINIDL_CHECK(tensor_.version() == version_,
                 "backward: one of the tensors needed for "
                 "gradient computation has been modified by an in-place operation: a ",
                 tensor_.dtype(), " tensor of shape ", tensor_.shape_str(), " saved by ",
                 node.name(), " is at version ", tensor_.version(), "; expected version ", version_,
                 " instead");
  return tensor_;
}

std::vector<Tensor> FunctionNode::apply(std::vector<Tensor>&& grads) {
  bool any = false;
  for (const Tensor& g : grads) any = any || g.defined();
  if (!any) return std::vector<Tensor>(next_edges.size());
  std::vector<Tensor> saved;
  saved.reserve(saved_.size());
  for (const SavedTensor& s : saved_) saved.push_back(s.unpack(*this));
  std::vector<Tensor> out = fn_(grads, saved);
  MINIDL_CHECK(out.size() == next_edges.size(), "internal: ", name_, " returned ", out.size(),
               " gradients for ", next_edges.size(), " inputs");
  return out;
}

void FunctionNode::release_saved() {
  for (SavedTensor& s : saved_) s.release();
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grads) {
  Tensor g = std::move(grads[0]);
  if (!g.defined()) return {};  // no gradient reached this leaf in this backward
  AutogradMeta& m = autograd::ensure_meta(leaf_);
  for (auto& hook : m.leaf_hooks)
    if (Tensor r = hook(g); r.defined()) g = r;
  MINIDL_CHECK(g.shape() == leaf_.shape(), "AccumulateGrad: gradient of shape ", g.shape_str(),
               " for a leaf of shape ", leaf_.shape_str());
  if (g.dtype() != leaf_.dtype()) g = g.to(leaf_.dtype());
  if (!m.grad.defined()) {
    // Steal the buffer when nobody else holds it, else copy (the grad must not alias).
    const bool sole =
        g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && g.is_contiguous();
    m.grad = sole ? g : g.clone();
  } else {
    add_(m.grad, g);
  }
  for (auto& hook : m.post_accumulate_hooks) hook(m.grad);
  return {};
}

namespace autograd {

AutogradMeta* meta(const Tensor& t) {
  return t.defined() ? t.impl()->autograd.get() : nullptr;
}

AutogradMeta& ensure_meta(const Tensor& t) {
  MINIDL_CHECK(t.defined(), "autograd: undefined tensor");
  auto& m = t.impl()->autograd;
  if (!m) m = std::make_shared<AutogradMeta>();
  return *m;
}

Edge gradient_edge(const Tensor& t) {
  AutogradMeta* m = meta(t);
  if (!m || !m->requires_grad) return {};
  if (m->grad_fn) return {m->grad_fn, m->output_nr};
  auto acc = m->accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t);
    m->accumulator = acc;
  }
  return {acc, 0};
}

bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

void set_history(const std::vector<Tensor>& inputs, const std::shared_ptr<Node>& node,
                 const std::vector<Tensor*>& outputs) {
  node->next_edges.clear();
  for (const Tensor& t : inputs) node->next_edges.push_back(gradient_edge(t));
  node->num_outputs = uint32_t(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i] || !outputs[i]->defined()) continue;
    AutogradMeta& m = ensure_meta(*outputs[i]);
    m.requires_grad = true;
    m.grad_fn = node;
    m.output_nr = uint32_t(i);
  }
}

void check_inplace(std::string_view op, const Tensor& self, const Tensor& other) {
  if (!GradMode::is_enabled()) return;
  if (self.defined() && self.requires_grad()) {
    MINIDL_CHECK(!self.is_leaf(), "op `", op,
                 "`: a leaf tensor that requires grad is being used "
                 "in an in-place operation (shape ",
                 self.shape_str(), ")");
    MINIDL_FAIL("op `", op,
                "`: in-place operations on tensors with autograd history are not "
                "supported yet (shape ",
                self.shape_str(), ")");
  }
  MINIDL_CHECK(!other.defined() || !other.requires_grad(), "op `", op,
               "`: in-place operations "
               "with an operand that requires grad (shape ",
               other.shape_str(),
               ") are not "
               "supported yet: the gradient would be dropped (use the out-of-place op, detach() "
               "the operand, or NoGradGuard)");
}

}  // namespace autograd

// ---- Tensor members
bool Tensor::requires_grad() const {
  AutogradMeta* m = autograd::meta(*this);
  return m && m->requires_grad;
}

Tensor& Tensor::requires_grad_(bool on) {
  MINIDL_CHECK(is_leaf(),
               "requires_grad_: you can only change requires_grad flags of leaf "
               "tensors (this one has grad_fn ",
               grad_fn()->name(), ")");
  MINIDL_CHECK(!on || is_floating_point(),
               "requires_grad_: only tensors of floating "
               "point dtype can require gradients, got ",
               dtype());
  autograd::ensure_meta(*this).requires_grad = on;
  return *this;
}

const Tensor& Tensor::grad() const {
  AutogradMeta* m = autograd::meta(*this);
  return m ? m->grad : kUndefined;
}

Tensor& Tensor::mutable_grad() {
  return autograd::ensure_meta(*this).grad;
}

void Tensor::set_grad(const Tensor& g) {
  MINIDL_CHECK(!g.defined() || g.shape() == shape(), "set_grad: gradient of shape ",
               g.defined() ? g.shape_str() : "", " for a tensor of shape ", shape_str());
  autograd::ensure_meta(*this).grad = g;
}

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  AutogradMeta* m = autograd::meta(*this);
  return m ? m->grad_fn : kNoNode;
}

bool Tensor::is_leaf() const {
  return grad_fn() == nullptr;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::run_backward({*this}, {gradient}, retain_graph);
}

Tensor Tensor::detach() const {
  return as_strided(shape(), strides(), storage_offset());  // new impl, no autograd meta
}

Tensor& Tensor::detach_() {
  MINIDL_CHECK(defined(), "detach_: undefined tensor");
  if (AutogradMeta* m = autograd::meta(*this)) {
    m->grad_fn.reset();
    m->requires_grad = false;
  }
  return *this;
}

void Tensor::retain_grad() {
  MINIDL_CHECK(requires_grad(),
               "retain_grad: can't retain_grad on a tensor that has "
               "requires_grad=false");
  if (is_leaf()) return;  // leaves keep .grad anyway
  AutogradMeta& m = autograd::ensure_meta(*this);
  if (m.retains_grad) return;
  m.retains_grad = true;
  std::weak_ptr<TensorImpl> weak = impl_ptr();
  auto& hooks = m.grad_fn->output_hooks;
  if (hooks.size() <= m.output_nr) hooks.resize(m.output_nr + 1);
  hooks[m.output_nr].push_back([weak](const Tensor& g) -> Tensor {
    if (auto impl = weak.lock()) {
      Tensor self(impl);
      Tensor& stored = autograd::ensure_meta(self).grad;
      stored = stored.defined() ? minidl::add(stored, g) : g.clone();
    }
    return {};
  });
}

size_t Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) {
  MINIDL_CHECK(requires_grad(),
               "register_hook: cannot register a hook on a tensor that "
               "doesn't require gradient");
  AutogradMeta& m = autograd::ensure_meta(*this);
  if (is_leaf()) {
    m.leaf_hooks.push_back(std::move(hook));
    return m.leaf_hooks.size() - 1;
  }
  auto& hooks = m.grad_fn->output_hooks;
  if (hooks.size() <= m.output_nr) hooks.resize(m.output_nr + 1);
  hooks[m.output_nr].push_back(std::move(hook));
  return hooks[m.output_nr].size() - 1;
}

size_t Tensor::register_post_accumulate_grad_hook(std::function<void(Tensor&)> hook) {
  MINIDL_CHECK(is_leaf() && requires_grad(),
               "register_post_accumulate_grad_hook: only leaf "
               "tensors that require grad can have post-accumulate-grad hooks");
  AutogradMeta& m = autograd::ensure_meta(*this);
  m.post_accumulate_hooks.push_back(std::move(hook));
  return m.post_accumulate_hooks.size() - 1;
}

}  // namespace minidl
