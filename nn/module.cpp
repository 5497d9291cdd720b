// nn::Module implementation: registration, traversal, mode/conversion and PyTorch-style repr
// (state dicts: module_state_dict.cpp; clone: module_clone.cpp).
#include "nn/module.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <typeinfo>

#include "autograd/grad_mode.h"
#include "nn/module_walk.h"
#include "nn/set_data.h"

namespace minidl::nn {

using detail::join_name;
using detail::visit;

// ---------------------------------------------------------------- registration

std::ptrdiff_t Module::slot_offset(const void* slot, const char* what) const {
  MINIDL_CHECK(slot != nullptr, what, ": null slot");
  const char* self = reinterpret_cast<const char*>(this);
  const char* p = reinterpret_cast<const char*>(slot);
  const std::ptrdiff_t off = p - self;
  // Slots must be data members of this object (offsets stay valid for member-wise copies), and
  // not inside the Module base. With a known object size (Cloneable<Derived>) the slot must lie
  // in the Derived object: an element of a std::vector member or a local variable is refused.
  // Called from Derived's constructor, where the dynamic type is Derived.
  const size_t size = object_size();
  const char* start = reinterpret_cast<const char*>(dynamic_cast<const void*>(this));
  const bool in_base = p >= self && p < self + sizeof(Module);
  const bool inside = size > 0 ? p >= start && p < start + size && !in_base
                               : off >= std::ptrdiff_t(sizeof(Module)) && off < (1 << 20);
  if (!inside) {
    const std::string where =
        size > 0 ? " (it lies outside this " + std::to_string(size) + "-byte " + name() +
                       " object or in its Module base)"
                 : " (it lies " + std::to_string(off) + " bytes from the " + name() + " object)";
    MINIDL_FAIL(what, ": the slot must be a data member of the module (pointer to member)", where,
                "; a local variable or an element of a std::vector member cannot be a slot: "
                "make it a data member, or keep children in a container and add_module(name, "
                "child) each (or use nn::ModuleList)");
  }
  return off;
}

void Module::check_new_name(const std::string& name, const char* what) const {
  MINIDL_CHECK(!name.empty() && name.find('.') == std::string::npos, what, ": invalid name '", name,
               "' (must be non-empty and contain no '.')");
  auto same = [&](const auto& e) { return e.name == name; };
  MINIDL_CHECK(std::none_of(params_.begin(), params_.end(), same) &&
                   std::none_of(buffers_.begin(), buffers_.end(), same) &&
                   std::none_of(children_.begin(), children_.end(), same),
               what, ": attribute '", name, "' is already registered");
}

void Module::register_parameter(std::string name, Tensor* slot, bool requires_grad) {
  check_new_name(name, "register_parameter");
  std::ptrdiff_t off = slot_offset(slot, "register_parameter");
  if (slot->defined()) {
    MINIDL_CHECK(!requires_grad || slot->is_floating_point(), "register_parameter: '", name,
                 "' of dtype ", dtype_name(slot->dtype()), " cannot require gradients");
    if (!slot->is_leaf()) *slot = slot->detach();
    slot->requires_grad_(requires_grad);
  }
  params_.push_back({std::move(name), off});
}

Tensor& Module::parameter_slot(const std::string& name) {
  std::string names;
  for (const TensorEntry& e : params_) {
    if (e.name == name) return tensor_at(e.offset);
    names += (names.empty() ? "" : ", ") + e.name;
  }
  MINIDL_FAIL(this->name(), ".parameter_slot: no parameter '", name,
              "' (its own parameters: ", names.empty() ? std::string("none") : names, ")");
}

void Module::register_buffer(std::string name, Tensor* slot) {
  check_new_name(name, "register_buffer");
  buffers_.push_back({name, slot_offset(slot, "register_buffer")});
}

void Module::add_child(ChildEntry e, const char* what) {
  check_new_name(e.name, what);
  children_.push_back(std::move(e));
}

void Module::add_module(std::string name, std::shared_ptr<Module> module) {
  MINIDL_CHECK(module != nullptr, "add_module: '", name, "' is null");
  ChildEntry e;
  e.name = std::move(name);
  e.owned = std::move(module);
  add_child(std::move(e), "add_module");
}

Tensor& Module::tensor_at(std::ptrdiff_t offset) const {
  return *reinterpret_cast<Tensor*>(const_cast<char*>(reinterpret_cast<const char*>(this)) +
                                    offset);
}

std::shared_ptr<Module> Module::child_at(const ChildEntry& e) const {
  if (e.offset < 0) return e.owned;
  return e.get(const_cast<Module*>(this), e.offset);
}

// ---------------------------------------------------------------- traversal

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  for (const auto& e : children_)
    if (auto c = child_at(e)) out.emplace_back(e.name, std::move(c));
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [n, c] : named_children()) out.push_back(c);
  return out;
}

void Module::collect_modules(const std::string& prefix,
                             std::vector<std::pair<std::string, std::shared_ptr<Module>>>& out,
                             std::vector<const Module*>& seen) const {
  for (auto& [n, c] : named_children()) {
    if (std::find(seen.begin(), seen.end(), c.get()) != seen.end()) continue;
    seen.push_back(c.get());
    std::string full = join_name(prefix, n);
    out.emplace_back(full, c);
    c->collect_modules(full, out, seen);
  }
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() const {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  std::shared_ptr<const Module> self = weak_from_this().lock();
  MINIDL_CHECK(self != nullptr, "named_modules: the module must be owned by a std::shared_ptr");
  out.emplace_back("", std::const_pointer_cast<Module>(self));
  std::vector<const Module*> seen{this};
  collect_modules("", out, seen);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::modules() const {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [n, m] : named_modules()) out.push_back(m);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::vector<const TensorImpl*> seen;
  visit(*this, recurse, [&](const Module& m, const std::string& prefix) {
    for (const auto& e : m.params_) {
      const Tensor& t = m.tensor_at(e.offset);
      if (!t.defined()) continue;
      if (std::find(seen.begin(), seen.end(), t.impl()) != seen.end()) continue;
      seen.push_back(t.impl());
      out.emplace_back(join_name(prefix, e.name), t);
    }
  });
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::vector<const TensorImpl*> seen;  // a shared buffer appears once, like torch
  visit(*this, recurse, [&](const Module& m, const std::string& prefix) {
    for (const auto& e : m.buffers_) {
      const Tensor& t = m.tensor_at(e.offset);
      if (!t.defined() || std::find(seen.begin(), seen.end(), t.impl()) != seen.end()) continue;
      seen.push_back(t.impl());
      out.emplace_back(join_name(prefix, e.name), t);
    }
  });
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

int64_t Module::num_parameters(bool only_trainable) const {
  int64_t n = 0;
  for (auto& p : parameters())
    if (!only_trainable || p.requires_grad()) n += p.numel();
  return n;
}

// ---------------------------------------------------------------- mode, conversion, grads

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children()) c->train(on);
}

void set_data(const Tensor& t, const Tensor& src) {
  if (t.is_same(src)) return;
  TensorImpl* d = t.impl();
  const TensorImpl* s = src.impl();
  d->storage = s->storage;
  d->shape = s->shape;
  d->strides = s->strides;
  d->offset = s->offset;
  d->dtype = s->dtype;
}

void Module::apply_to_tensors(const std::function<Tensor(const Tensor&)>& fn, bool floating_only,
                              bool recurse) {
  NoGradGuard guard;
  visit(*this, recurse, [&](const Module& cm, const std::string&) {
    Module& m = const_cast<Module&>(cm);
    for (const auto& e : m.params_) {
      Tensor& t = m.tensor_at(e.offset);
      if (!t.defined() || (floating_only && !t.is_floating_point())) continue;
      MINIDL_CHECK(t.is_leaf(), "Module.to: parameter '", e.name, "' is not a leaf tensor");
      const Tensor g = t.grad();  // moved too, keeping its identity
      set_data(t, fn(t).detach());
      if (g.defined()) set_data(g, fn(g).detach());
    }
    for (const auto& e : m.buffers_) {
      Tensor& t = m.tensor_at(e.offset);
      if (!t.defined() || (floating_only && !t.is_floating_point())) continue;
      set_data(t, fn(t).detach());
    }
  });
}

Module& Module::to(Device device) {
  apply_to_tensors([&](const Tensor& t) { return t.to(device); }, false);
  return *this;
}

Module& Module::to(DType dtype) {
  MINIDL_CHECK(is_floating(dtype), "Module.to: only floating dtypes are allowed, got ",
               dtype_name(dtype));
  apply_to_tensors([&](const Tensor& t) { return t.to(dtype); }, true);
  return *this;
}

Module& Module::to_own(DType dtype) {
  MINIDL_CHECK(is_floating(dtype), "Module.to: only floating dtypes are allowed, got ",
               dtype_name(dtype));
  apply_to_tensors([&](const Tensor& t) { return t.to(dtype); }, true, /*recurse=*/false);
  return *this;
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard guard;
  for (auto& p : parameters()) {
    if (!p.grad().defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      Tensor& g = p.mutable_grad();
      if (g.grad_fn()) g = g.detach();
      g.zero_();
    }
  }
}

// ---------------------------------------------------------------- forward, printing

Tensor Module::forward(const Tensor& x) {
  // A module whose forward takes several tensors (Cloneable routes by arity) reports the arity
  // mismatch: "TwoIn: forward called with 1 tensor(s), but its forward takes 2". One with no
  // forward at all comes back here from forward_inputs, and says so.
  static thread_local const Module* routing = nullptr;
  if (routing != this) {
    const Module* outer = routing;
    routing = this;
    struct Restore {
      const Module* outer;
      ~Restore() { routing = outer; }
    } restore{outer};
    return forward_inputs({x});
  }
  MINIDL_FAIL(name(), ": forward(const Tensor&) is not implemented for this module");
}

std::string Module::name() const {
  const char* mangled = typeid(*this).name();
  int status = 0;
  char* dem = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = (status == 0 && dem) ? dem : mangled;
  std::free(dem);
  auto lt = s.find('<');
  std::string base = s.substr(0, lt);
  auto colon = base.rfind("::");
  if (colon != std::string::npos) s = s.substr(colon + 2);
  return s;
}

std::string Module::extra_repr() const {
  return "";
}

std::string Module::repr() const {
  std::string extra = extra_repr();
  std::vector<std::string> lines;
  if (!extra.empty()) {
    std::istringstream is(extra);
    for (std::string l; std::getline(is, l);) lines.push_back(l);
  }
  for (auto& [n, c] : named_children()) {
    std::string child = c->repr();
    std::string indented;  // _addindent(child, 2)
    for (char ch : child) {
      indented += ch;
      if (ch == '\n') indented += "  ";
    }
    lines.push_back("(" + n + "): " + indented);
  }
  std::string out = name() + "(";
  if (!lines.empty()) {
    if (extra.empty() || lines.size() > 1 || !named_children().empty()) {
      out += "\n";
      for (auto& l : lines) out += "  " + l + "\n";
    } else {
      out += lines[0];
    }
  }
  return out + ")";
}

std::ostream& operator<<(std::ostream& os, const Module& m) {
  return os << m.repr();
}

}  // namespace minidl::nn
