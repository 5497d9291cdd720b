// check_registration: a walk over the autograd graph of a forward's output to its leaves,
// comparing them with the module's registered parameters.
#include "nn/registration_check.h"

#include <algorithm>
#include <limits>
#include <sstream>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "autograd/engine.h"
#include "autograd/node.h"

namespace minidl::nn {

std::string UnregisteredTensor::str() const {
  std::ostringstream os;
  os << tensor.shape_str() << " " << dtype_name(tensor.dtype()) << " (used by " << used_by;
  if (!after.empty()) os << " after '" << after << "'";
  if (!before.empty()) os << (after.empty() ? " " : ", ") << "before '" << before << "'";
  os << ")";
  return os.str();
}

std::vector<UnregisteredTensor> check_registration(const Module& module, const Tensor& output,
                                                   const std::vector<Tensor>& inputs) {
  std::vector<UnregisteredTensor> out;
  if (!output.defined() || !output.requires_grad()) return out;
  std::unordered_map<const TensorImpl*, std::pair<size_t, std::string>> registered;  // index, name
  for (const auto& [name, p] : module.named_parameters())
    registered.emplace(p.impl(), std::make_pair(registered.size(), name));
  std::unordered_set<const TensorImpl*> input_leaves;
  std::unordered_set<const Node*> visited;  // nodes not to enter again (inputs' history too)
  for (const Tensor& x : inputs) {
    if (!x.defined()) continue;
    input_leaves.insert(x.impl());
    if (x.grad_fn()) visited.insert(x.grad_fn().get());
  }

  // Every leaf reached, with the first (earliest created) node that consumed it.
  struct Use {
    Tensor leaf;
    const Node* consumer = nullptr;
  };
  std::unordered_map<const TensorImpl*, Use> leaves;
  std::vector<const TensorImpl*> order;
  auto reach = [&](const Tensor& leaf, const Node* consumer) {
    auto [it, fresh] = leaves.try_emplace(leaf.impl(), Use{leaf, consumer});
    if (fresh) {
      order.push_back(leaf.impl());
    } else if (consumer &&
               (!it->second.consumer || consumer->sequence_nr < it->second.consumer->sequence_nr)) {
      it->second.consumer = consumer;
    }
  };
  if (!output.grad_fn()) {
    reach(output, nullptr);  // the forward returned a leaf
  } else {
    std::vector<const Node*> stack{output.grad_fn().get()};
    visited.insert(stack.back());
    while (!stack.empty()) {
      const Node* n = stack.back();
      stack.pop_back();
      for (const Edge& e : n->next_edges) {
        if (!e.valid()) continue;
        if (const auto* acc = dynamic_cast<const AccumulateGrad*>(e.fn.get())) {
          reach(acc->leaf(), n);
          continue;
        }
        if (visited.insert(e.fn.get()).second) stack.push_back(e.fn.get());
      }
    }
  }

  // The registered parameters' first uses, in forward order (ties, e.g. a Linear's weight and
  // bias in one node, in registration order), to place each unregistered one.
  constexpr uint64_t kNone = std::numeric_limits<uint64_t>::max();
  auto seq = [&](const Use& u) { return u.consumer ? u.consumer->sequence_nr : kNone; };
  struct RegisteredUse {
    uint64_t seq;
    size_t index;
    std::string name;
  };
  std::vector<RegisteredUse> uses;
  for (const auto& [impl, u] : leaves) {
    auto it = registered.find(impl);
    if (it != registered.end()) uses.push_back({seq(u), it->second.first, it->second.second});
  }
  std::sort(uses.begin(), uses.end(), [](const RegisteredUse& a, const RegisteredUse& b) {
    return std::tie(a.seq, a.index) < std::tie(b.seq, b.index);
  });
  std::vector<std::pair<uint64_t, UnregisteredTensor>> found;
  for (const TensorImpl* impl : order) {
    if (registered.count(impl) || input_leaves.count(impl)) continue;
    const Use& u = leaves.at(impl);
    UnregisteredTensor r;
    r.tensor = u.leaf;
    r.used_by = u.consumer ? u.consumer->name() : std::string("the output itself");
    const uint64_t s = seq(u);
    // The last registered use before this node and the first after it.
    auto next = std::upper_bound(uses.begin(), uses.end(), s,
                                 [](uint64_t v, const RegisteredUse& x) { return v < x.seq; });
    auto prev = std::lower_bound(uses.begin(), uses.end(), s,
                                 [](const RegisteredUse& x, uint64_t v) { return x.seq < v; });
    if (prev != uses.begin()) r.after = std::prev(prev)->name;
    if (next != uses.end() && next->seq != kNone) r.before = next->name;
    found.emplace_back(s, std::move(r));
  }
  std::stable_sort(found.begin(), found.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [s, r] : found) out.push_back(std::move(r));
  return out;
}

std::string unregistered_message(const std::string& context, const std::string& module_name,
                                 const std::vector<UnregisteredTensor>& found) {
  std::ostringstream os;
  os << context << ": the forward of " << module_name << " used " << found.size()
     << " tensor(s) that require grad but are not registered in the module, so parameters(), "
        "state_dict(), optimizers, clone(), to() and DDP's gradient averaging miss them:";
  for (const UnregisteredTensor& u : found) os << "\n  " << u.str();
  os << "\nRegister each where it is held: register_parameter(\"name\", &member) for a tensor, "
        "register_module(\"name\", &member) for a layer (or add_module(\"name\", layer) for one "
        "kept in a container)";
  return os.str();
}

void assert_registered(const Module& module, const Tensor& output,
                       const std::vector<Tensor>& inputs, const std::string& context) {
  const std::vector<UnregisteredTensor> found = check_registration(module, output, inputs);
  if (found.empty()) return;
  MINIDL_FAIL(unregistered_message(context, module.name(), found));
}

std::vector<UnregisteredTensor> unregistered_after_backward(
    const std::unordered_set<const TensorImpl*>& optimized, std::string* module_name) {
  std::vector<UnregisteredTensor> out;
  const RootCall root = last_root_call();
  const std::shared_ptr<const Module> module = root.module.lock();
  if (!module) return out;
  if (module_name) *module_name = module->name();
  std::unordered_map<const TensorImpl*, std::pair<size_t, std::string>> registered;
  for (const auto& [name, p] : module->named_parameters())
    registered.emplace(p.impl(), std::make_pair(registered.size(), name));
  std::unordered_set<const TensorImpl*> inputs;
  for (const auto& w : root.inputs)
    if (auto x = w.lock()) inputs.insert(x.get());
  // Registered uses by consumer order (ties, e.g. a Linear's weight and bias in one node, in
  // registration order), to place each unregistered leaf between two names.
  std::vector<std::tuple<uint64_t, size_t, std::string>> uses;
  std::vector<std::pair<autograd::LeafUse, Tensor>> suspects;
  for (const autograd::LeafUse& u : autograd::last_backward_leaves()) {
    std::shared_ptr<TensorImpl> impl = u.leaf.lock();
    if (!impl) continue;
    if (auto it = registered.find(impl.get()); it != registered.end()) {
      uses.emplace_back(u.sequence_nr, it->second.first, it->second.second);
      continue;
    }
    if (optimized.count(impl.get()) || inputs.count(impl.get())) continue;
    suspects.emplace_back(u, Tensor(impl));
  }
  std::sort(uses.begin(), uses.end());
  std::sort(suspects.begin(), suspects.end(),
            [](const auto& a, const auto& b) { return a.first.sequence_nr < b.first.sequence_nr; });
  for (auto& [u, t] : suspects) {
    UnregisteredTensor r;
    r.tensor = t;
    r.used_by = u.used_by;
    const uint64_t s = u.sequence_nr;
    auto next = std::upper_bound(uses.begin(), uses.end(), s,
                                 [](uint64_t v, const auto& x) { return v < std::get<0>(x); });
    auto prev = std::lower_bound(uses.begin(), uses.end(), s,
                                 [](const auto& x, uint64_t v) { return std::get<0>(x) < v; });
    if (prev != uses.begin()) r.after = std::get<2>(*std::prev(prev));
    if (next != uses.end()) r.before = std::get<2>(*next);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace minidl::nn
