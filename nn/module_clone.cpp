// nn::Module deep copies: clone() through Cloneable, the check that no copied member still
// points at the original, and replace_module.
#include "nn/module.h"

#include <cstdint>
#include <cstring>

#include "autograd/grad_mode.h"
#include "nn/module_walk.h"

namespace minidl::nn {

using detail::join_name;
using detail::visit;

std::shared_ptr<Module> Module::clone(CloneMemo&) const {
  MINIDL_FAIL("clone: ", name(), " does not support clone(); derive it from nn::Cloneable<", name(),
              ">");
}

void Module::deep_copy_after_member_copy(CloneMemo& memo) {
  NoGradGuard guard;
  if (hooks_) hooks_ = std::make_shared<RemovableHandle::Hooks>(*hooks_);  // the copy's own list
  auto cloned = [&](Tensor& t, bool keep_requires_grad) {
    if (!t.defined()) return;
    auto it = memo.tensors.find(t.impl());
    if (it != memo.tensors.end()) {
      t = it->second;
      return;
    }
    const TensorImpl* original = t.impl();
    Tensor c = t.detach().clone();
    if (keep_requires_grad && t.requires_grad()) c.requires_grad_(true);
    memo.tensors.emplace(original, c);
    t = c;
  };
  for (const auto& e : params_) cloned(tensor_at(e.offset), true);
  for (const auto& e : buffers_) cloned(tensor_at(e.offset), false);
  for (auto& e : children_) {
    std::shared_ptr<Module> c = child_at(e);
    if (!c) continue;
    auto it = memo.modules.find(c.get());
    std::shared_ptr<Module> cc = it != memo.modules.end() ? it->second : c->clone(memo);
    if (e.offset < 0)
      e.owned = cc;
    else
      e.set(this, e.offset, cc);
  }
}

void Module::check_clone_members(const CloneMemo& memo) const {
  // What the originals are: every cloned module (its Module base and its object start) and
  // every cloned tensor's TensorImpl. A registered slot of a clone holds the clone's own
  // module/tensor, so a word of a clone still equal to an original address is a member the
  // member-wise copy shared with the original without registration knowing it. A word counts
  // only when the original holds the same value at the same place (the copy took it from
  // there), which rules out stale bytes in padding or a short string's buffer.
  std::unordered_map<std::uintptr_t, const void*> originals;  // address -> Module* or TensorImpl*
  for (const auto& [orig, c] : memo.modules) {
    originals.emplace(reinterpret_cast<std::uintptr_t>(orig), orig);
    originals.emplace(reinterpret_cast<std::uintptr_t>(dynamic_cast<const void*>(orig)), orig);
  }
  for (const auto& [impl, t] : memo.tensors)
    originals.emplace(reinterpret_cast<std::uintptr_t>(impl), impl);
  for (const auto& entry : memo.modules) {
    // Named, not a structured binding: the lambda below captures it (clang 14, which the fuzz
    // build uses, refuses lambdas that capture structured bindings).
    const Module* orig = entry.first;
    const auto& c = entry.second;
    const size_t size = c->object_size();
    if (size == 0) continue;
    const char* cbase = reinterpret_cast<const char*>(c.get());
    const char* start = reinterpret_cast<const char*>(dynamic_cast<const void*>(c.get()));
    const char* obase = reinterpret_cast<const char*>(orig);
    constexpr size_t kWord = sizeof(std::uintptr_t);
    const char* first = start + (kWord - reinterpret_cast<std::uintptr_t>(start) % kWord) % kWord;
    for (const char* p = first; p + kWord <= start + size; p += kWord) {
      if (p + kWord > cbase && p < cbase + sizeof(Module)) continue;  // Module's own members
      std::uintptr_t word = 0, orig_word = 0;
      std::memcpy(&word, p, kWord);
      auto it = originals.find(word);
      if (it == originals.end()) continue;
      std::memcpy(&orig_word, obase + (p - cbase), kWord);
      if (orig_word != word) continue;
      // Names of the original tree's modules and tensors, for the message.
      std::string holder = "", target = "an original module or tensor";
      visit(*this, true, [&](const Module& m, const std::string& prefix) {
        if (&m == orig) holder = prefix;
        if (&m == it->second)
          target = "the original's submodule '" + (prefix.empty() ? "<root>" : prefix) + "' (" +
                   m.name() + ")";
        auto tensors = [&](const std::vector<TensorEntry>& entries, const char* kind) {
          for (const auto& e : entries) {
            const Tensor& t = m.tensor_at(e.offset);
            if (t.defined() && t.impl() == it->second)
              target = std::string("the original's ") + kind + " '" + join_name(prefix, e.name) +
                       "' " + t.shape_str() + " " + std::string(dtype_name(t.dtype()));
          }
        };
        tensors(m.params_, "parameter");
        tensors(m.buffers_, "buffer");
      });
      MINIDL_FAIL("clone: ", orig->name(), holder.empty() ? "" : " '" + holder + "'",
                  "'s member at byte offset ", p - start, " of the ", size, "-byte object ",
                  "still points at ", target,
                  " after the member-wise copy: a member that is not registered itself (a raw "
                  "pointer, a second shared_ptr or Tensor handle, or a child kept in a member "
                  "and also add_module'd) would make the clone use the original's weights. "
                  "Register it with register_module(\"name\", &member) / "
                  "register_parameter(\"name\", &member), or reach it through the registered "
                  "member");
    }
  }
}

void Module::replace_owned_module(const std::string& name, std::shared_ptr<Module> module) {
  MINIDL_CHECK(module != nullptr, "register_module: '", name, "' is null");
  for (auto& e : children_)
    if (e.name == name) {
      MINIDL_CHECK(e.offset < 0, "replace_owned_module: '", name, "' is a member slot");
      e.owned = std::move(module);
      return;
    }
  MINIDL_FAIL("replace_owned_module: no child named '", name, "'");
}

void Module::replace_module(const std::string& name, std::shared_ptr<Module> module) {
  MINIDL_CHECK(module != nullptr, "replace_module: the new '", name, "' is null");
  for (auto& e : children_)
    if (e.name == name) {
      if (e.offset < 0) {
        e.owned = std::move(module);
        return;
      }
      const std::shared_ptr<Module> old = child_at(e);
      try {
        e.set(this, e.offset, module);
      } catch (const Error&) {
        MINIDL_FAIL("replace_module: ", this->name(), "'s member '", name, "' holds a ",
                    old ? old->name() : std::string("null module"), " and cannot hold a ",
                    module->name(), "; declare it std::shared_ptr<nn::Module>");
      }
      return;
    }
  MINIDL_FAIL("replace_module: ", this->name(), " has no child named '", name, "'");
}

}  // namespace minidl::nn
