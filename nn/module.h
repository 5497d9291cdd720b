// nn::Module: the base class of layers and models (torch.nn.Module): parameter/buffer/child
// registration by pointer to member, recursive traversal, train/eval, dtype/device moves,
// state_dict loading, deep clone (via Cloneable<Derived>) and PyTorch-style printing.
#pragma once

#include <cstddef>
#include <functional>
#include <iosfwd>
#include <map>
#include <optional>
#include <memory>
#include <concepts>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/error.h"
#include "tensor/tensor.h"

namespace minidl::nn {

using StateDict = std::map<std::string, Tensor>;

struct LoadStateDictResult {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

// Registration stores each slot as a byte offset from the Module base of `this`, so a member-wise
// copy of the derived object (what Cloneable::clone does) refers to its own members. Slots must
// therefore be data members of the module object itself (e.g. `Tensor weight_;`,
// `std::shared_ptr<Linear> fc1_;`); a slot outside the object (a local variable, an element of a
// std::vector member) is refused. For a Cloneable<Derived> the bound is sizeof(Derived), so a
// class derived from a Cloneable layer cannot register members of its own (its clone() would
// slice it); a plain Module subclass (no Cloneable) is only checked for plausible offsets.
// Modules without a member slot (Sequential, ModuleList, children kept in a std::vector) use
// add_module(name, module), which keeps the child inside Module. `register_module("fc", fc)`
// without `&` does not compile. A parameter slot holding an undefined tensor (e.g. bias=false)
// is skipped by all traversals. A tensor or module held in a member but never registered is
// invisible to parameters(), state_dict(), to(), clone() and DDP: nn::check_registration
// (nn/registration_check.h) finds such tensors from a forward's output, DDP and DataParallel
// run it on their first forward, and clone() refuses a member that still points into the
// original after the copy (see Module::clone).
//
// Usage:
//   struct Net : nn::Cloneable<Net> {
//     std::shared_ptr<nn::Linear> fc_;
//     Tensor scale_;
//     Net() {
//       fc_ = std::make_shared<nn::Linear>(4, 3);
//       register_module("fc", &fc_);
//       scale_ = ones({3});
//       register_parameter("scale", &scale_);
//     }
//     Tensor forward(const Tensor& x) override { return mul((*fc_)(x), scale_); }
//   };
// Derive from Cloneable<Derived> (not Module directly) to get a working deep clone();
// Derived must be copy-constructible (the member-wise copy is then made deep).
class Module : public std::enable_shared_from_this<Module> {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module& operator=(const Module&) = delete;

  // ---- registration (slot = pointer to a data member of this module)
  void register_parameter(std::string name, Tensor* slot, bool requires_grad = true);
  void register_buffer(std::string name, Tensor* slot);
  // The slot of this module's own parameter `name` (not a child's), for a wrapper that swaps
  // what the slot holds: FullyShardedDataParallel puts views of its gathered flat parameter
  // there and puts the originals back (torch's setattr on a module). Throws naming the
  // module's parameters when it has no parameter `name`.
  Tensor& parameter_slot(const std::string& name);
  template <class M>
  void register_module(std::string name, std::shared_ptr<M>* slot) {
    static_assert(std::is_base_of_v<Module, M>, "register_module: M must derive from nn::Module");
    ChildEntry e;
    e.name = std::move(name);
    e.offset = slot_offset(slot, "register_module");
    e.get = [](Module* self, std::ptrdiff_t off) -> std::shared_ptr<Module> {
      return *reinterpret_cast<std::shared_ptr<M>*>(reinterpret_cast<char*>(self) + off);
    };
    e.set = [](Module* self, std::ptrdiff_t off, std::shared_ptr<Module> m) {
      auto typed = std::dynamic_pointer_cast<M>(m);
      MINIDL_CHECK(typed != nullptr || m == nullptr, "register_module: clone has a wrong type");
      *reinterpret_cast<std::shared_ptr<M>*>(reinterpret_cast<char*>(self) + off) = typed;
    };
    add_child(std::move(e), "register_module");
  }
  // Owning registration (torch's add_module; no member slot): the child is held by this Module.
  void add_module(std::string name, std::shared_ptr<Module> module);
  // Not a slot: `register_module("fc", fc)` forgot the `&`. Pass the member's address,
  // register_module("fc", &fc), or use add_module("fc", fc) for a child with no member slot.
  template <class M>
  void register_module(std::string,
                       std::shared_ptr<M> pass_the_member_address_or_use_add_module) = delete;
  // Replaces the direct child `name` (torch's setattr on a submodule): an owned child, or a
  // member slot whose type can hold `module` (std::shared_ptr<Module> holds any module, a slot
  // std::shared_ptr<BatchNorm2d> only a BatchNorm2d). Errors name the child and both types.
  void replace_module(const std::string& name, std::shared_ptr<Module> module);

  // ---- traversal (registration order, own entries first, then children; dotted names)
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  std::vector<std::shared_ptr<Module>> children() const;
  // Includes this module under the name "" (it must be owned by a shared_ptr).
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules() const;
  std::vector<std::shared_ptr<Module>> modules() const;
  int64_t num_parameters(bool only_trainable = false) const;

  // ---- mode, conversion, gradients
  virtual void train(bool on = true);  // recursive
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // In place, like torch's module.to(): every parameter, its .grad and every buffer keeps its
  // Tensor identity (handles held by optimizers stay valid), leaf-ness and requires_grad.
  Module& to(Device device);
  Module& to(DType dtype);  // floating parameters and buffers only
  Module& to(Device device, DType dtype) { return to(device).to(dtype); }
  // Like to(dtype) for this module's own parameters and buffers only, not its children's
  // (AMP O2 casts a model except its normalisation layers).
  Module& to_own(DType dtype);
  void zero_grad(bool set_to_none = true);

  // ---- state
  StateDict state_dict() const;  // params + buffers, detached aliases
  LoadStateDictResult load_state_dict(const StateDict& state, bool strict = true);

  // Deep independent copy; implemented by Cloneable<Derived>. The base version throws.
  // Like copy.deepcopy, identity is kept: a tensor (TensorImpl) or child module reachable from
  // several places (tied weights, a shared submodule) is cloned once and the clone is shared by
  // all those places. `memo` maps originals to their clones for one clone() call.
  struct CloneMemo {
    std::unordered_map<const TensorImpl*, Tensor> tensors;
    std::unordered_map<const Module*, std::shared_ptr<Module>> modules;
  };
  // After the copy, every cloned module's object is checked for a word that still points at an
  // original module or tensor (an unregistered member that aliases a registered one, e.g. a raw
  // pointer or second shared_ptr to a child): it would make the clone train the original's
  // weights, so clone() throws naming the member's offset and what it points at.
  std::shared_ptr<Module> clone() const {
    CloneMemo memo;
    std::shared_ptr<Module> copy = clone(memo);
    check_clone_members(memo);
    return copy;
  }
  virtual std::shared_ptr<Module> clone(CloneMemo& memo) const;

  // ---- forward and printing
  virtual Tensor forward(const Tensor& x);
  // Several tensor inputs (torch's forward(*args)): what DDP, DataParallel, the Accelerator and
  // `module(x, mask)` call. Cloneable<Derived> routes it to Derived's forward taking that many
  // `const Tensor&` (up to kMaxForwardInputs); the base takes one input only.
  virtual Tensor forward_inputs(const std::vector<Tensor>& inputs);
  static constexpr size_t kMaxForwardInputs = 6;

  // Calls run the forward hooks (torch's module(x)); forward() itself does not.
  Tensor operator()(const Tensor& x);
  template <class... Ts>
  requires(sizeof...(Ts) >= 2 && (std::same_as<std::remove_cvref_t<Ts>, Tensor> && ...)) Tensor
  operator()(const Ts&... inputs) {
    return call({inputs...});
  }
  // operator() on a list of inputs: the hooks, then forward (one input) or forward_inputs.
  Tensor call(std::vector<Tensor> inputs);

  // ---- hooks and apply
  // torch's register_forward_pre_hook: runs before forward with the inputs; returning a value
  // replaces them. register_forward_hook: runs after, with inputs and output; returning a
  // value replaces the output. Hooks run in registration order, only for calls through
  // operator() (and the wrappers); clone() copies them (the copy's list is its own).
  using ForwardPreHook =
      std::function<std::optional<std::vector<Tensor>>(Module&, const std::vector<Tensor>&)>;
  using ForwardHook =
      std::function<std::optional<Tensor>(Module&, const std::vector<Tensor>&, const Tensor&)>;
  class RemovableHandle {  // torch.utils.hooks.RemovableHandle
   public:
    RemovableHandle() = default;
    void remove();

   private:
    friend class Module;
    struct Hooks;
    RemovableHandle(std::weak_ptr<Hooks> hooks, uint64_t id) : hooks_(std::move(hooks)), id_(id) {}
    std::weak_ptr<Hooks> hooks_;
    uint64_t id_ = 0;
  };
  RemovableHandle register_forward_pre_hook(ForwardPreHook hook);
  RemovableHandle register_forward_hook(ForwardHook hook);
  // Whether a forward or forward-pre hook is registered (a fused path that would skip this
  // module's call, such as nn::residual_layer_norm, calls it instead then).
  bool has_forward_hooks() const;
  // fn on every submodule (children first, recursively) and then on this module, as
  // torch's module.apply(fn) (e.g. custom initialisation). Returns *this.
  Module& apply(const std::function<void(Module&)>& fn);
  virtual std::string name() const;        // "Linear"; default: the demangled class name
  virtual std::string extra_repr() const;  // "in_features=4, out_features=3, bias=True"
  std::string repr() const;                // PyTorch's print(module) format

 protected:
  // Copying is for Cloneable only (slots are offsets, so the copy sees its own members).
  Module(const Module&) = default;
  // Replaces every parameter/buffer by an independent clone and every child by its clone()
  // (each original tensor/module cloned once per memo).
  void deep_copy_after_member_copy(CloneMemo& memo);
  // Replaces the owned child registered as `name` (ModuleDict's assignment).
  void replace_owned_module(const std::string& name, std::shared_ptr<Module> module);

 private:
  struct TensorEntry {
    std::string name;
    std::ptrdiff_t offset;
  };
  struct ChildEntry {
    std::string name;
    std::ptrdiff_t offset = -1;  // -1: owned (held in `owned`)
    std::shared_ptr<Module> owned;
    std::shared_ptr<Module> (*get)(Module*, std::ptrdiff_t) = nullptr;
    void (*set)(Module*, std::ptrdiff_t, std::shared_ptr<Module>) = nullptr;
  };

  std::ptrdiff_t slot_offset(const void* slot, const char* what) const;
  // sizeof the object registration slots must lie in (Cloneable<Derived>: sizeof(Derived));
  // 0: unknown (a plain Module subclass).
  virtual size_t object_size() const { return 0; }
  // clone(): fails when a cloned module's member still refers to an original module or tensor.
  void check_clone_members(const CloneMemo& memo) const;
  void add_child(ChildEntry e, const char* what);
  void check_new_name(const std::string& name, const char* what) const;
  Tensor& tensor_at(std::ptrdiff_t offset) const;
  std::shared_ptr<Module> child_at(const ChildEntry& e) const;
  void collect_modules(const std::string& prefix,
                       std::vector<std::pair<std::string, std::shared_ptr<Module>>>& out,
                       std::vector<const Module*>& seen) const;
  void apply_to_tensors(const std::function<Tensor(const Tensor&)>& fn, bool floating_only,
                        bool recurse = true);

  std::vector<TensorEntry> params_;
  std::vector<TensorEntry> buffers_;
  std::vector<ChildEntry> children_;
  bool training_ = true;
  std::shared_ptr<RemovableHandle::Hooks> hooks_;  // null until a hook is registered
};

std::ostream& operator<<(std::ostream& os, const Module& m);

// The outermost module call (operator() or call) of the latest forward on any thread, kept
// while an optimizer awaits its first step (autograd::leaf_census_armed): the registration
// check of optimizer.step() names parameters by it. Empty when none was recorded, or when the
// module is not held by a shared_ptr.
struct RootCall {
  std::weak_ptr<const Module> module;
  std::vector<std::weak_ptr<TensorImpl>> inputs;
};
RootCall last_root_call();

struct Module::RemovableHandle::Hooks {
  uint64_t next_id = 1;
  std::vector<std::pair<uint64_t, ForwardPreHook>> pre;
  std::vector<std::pair<uint64_t, ForwardHook>> post;
};

// CRTP helper providing clone(): `struct Net : nn::Cloneable<Net> { ... };`
namespace detail {
template <size_t>
using TensorArg = const Tensor&;
// Whether M has a forward taking sizeof...(I) tensors (e.g. forward(x, mask)).
template <class M, size_t... I>
constexpr bool has_forward(std::index_sequence<I...>) {
  return requires(M & m, TensorArg<I>... xs) {
    { m.forward(xs...) } -> std::convertible_to<Tensor>;
  };
}
template <class M, size_t... I>
Tensor call_forward(M& m, const std::vector<Tensor>& in, std::index_sequence<I...>) {
  return m.forward(in[I]...);
}
// M's forward for in.size() tensors, or an error naming the arities M has.
template <class M>
Tensor forward_by_arity(M& m, const std::vector<Tensor>& in) {
  std::string arities;
  Tensor out;
  bool done = false;
  [&]<size_t... N>(std::index_sequence<N...>) {
    (([&] {
       if constexpr (has_forward<M>(std::make_index_sequence<N + 1>{})) {
         arities += (arities.empty() ? "" : ", ") + std::to_string(N + 1);
         if (!done && in.size() == N + 1) {
           out = call_forward(m, in, std::make_index_sequence<N + 1>{});
           done = true;
         }
       }
     }()),
     ...);
  }
  (std::make_index_sequence<Module::kMaxForwardInputs>{});
  MINIDL_CHECK(done, m.name(), ": forward called with ", in.size(),
               " tensor(s), but its forward takes ",
               arities.empty() ? std::string("none of 1..6 tensors") : arities);
  return out;
}
}  // namespace detail

template <class Derived>
class Cloneable : public Module {
 public:
  using Module::clone;
  Tensor forward_inputs(const std::vector<Tensor>& inputs) override {
    return detail::forward_by_arity(static_cast<Derived&>(*this), inputs);
  }
  std::shared_ptr<Module> clone(CloneMemo& memo) const override {
    auto copy = std::make_shared<Derived>(static_cast<const Derived&>(*this));
    memo.modules[this] = copy;
    copy->deep_copy_after_member_copy(memo);
    return copy;
  }

 private:
  size_t object_size() const override { return sizeof(Derived); }
};

}  // namespace minidl::nn
