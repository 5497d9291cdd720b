// nn::Module state dicts: state_dict() (parameters and buffers by dotted name) and
// load_state_dict (strict or not, every problem in one error, the "module." prefix stripped).
#include "nn/module.h"

#include <algorithm>
#include <iostream>
#include <sstream>

#include "autograd/grad_mode.h"
#include "nn/module_walk.h"

namespace minidl::nn {

using detail::join_name;
using detail::visit;

StateDict Module::state_dict() const {
  StateDict out;
  visit(*this, true, [&](const Module& m, const std::string& prefix) {
    for (const auto& e : m.params_) {
      const Tensor& t = m.tensor_at(e.offset);
      if (t.defined()) out[join_name(prefix, e.name)] = t.detach();
    }
    for (const auto& e : m.buffers_) {
      const Tensor& t = m.tensor_at(e.offset);
      if (t.defined()) out[join_name(prefix, e.name)] = t.detach();
    }
  });
  return out;
}

LoadStateDictResult Module::load_state_dict(const StateDict& state_in, bool strict) {
  const StateDict* state = &state_in;
  StateDict stripped;
  bool all_prefixed =
      !state_in.empty() && std::all_of(state_in.begin(), state_in.end(),
                                       [](auto& kv) { return kv.first.rfind("module.", 0) == 0; });
  if (all_prefixed) {
    std::cerr << "minidl warning: load_state_dict: stripping the 'module.' prefix from every key"
              << std::endl;
    for (auto& [k, v] : state_in) stripped[k.substr(7)] = v;
    state = &stripped;
  }
  StateDict own = state_dict();
  LoadStateDictResult res;
  for (auto& [k, v] : own)
    if (!state->count(k)) res.missing_keys.push_back(k);
  for (auto& [k, v] : *state)
    if (!own.count(k)) res.unexpected_keys.push_back(k);
  // Every problem in one error, as PyTorch: the key lists (strict), then each undefined tensor
  // and size mismatch. Nothing is copied unless all of it is fine.
  std::ostringstream os;
  bool failed = false;
  auto list = [&](const char* what, const std::vector<std::string>& keys) {
    if (keys.empty()) return;
    failed = true;
    os << " " << what << " key(s) in state_dict: ";
    for (size_t i = 0; i < keys.size(); ++i) os << (i ? ", " : "") << "\"" << keys[i] << "\"";
    os << ".";
  };
  if (strict) {
    list("Missing", res.missing_keys);
    list("Unexpected", res.unexpected_keys);
  }
  for (auto& [k, dst] : own) {
    auto it = state->find(k);
    if (it == state->end()) continue;
    if (!it->second.defined()) {
      os << " '" << k << "' is an undefined tensor.";
      failed = true;
    } else if (it->second.shape() != dst.shape()) {
      os << " size mismatch for " << k << ": copying a param with shape " << it->second.shape_str()
         << " from checkpoint, the shape in current model is " << dst.shape_str() << ".";
      failed = true;
    }
  }
  if (failed) MINIDL_FAIL("Error(s) in loading state_dict for ", name(), ":", os.str());
  NoGradGuard guard;
  for (auto& [k, dst] : own) {
    auto it = state->find(k);
    if (it == state->end()) continue;
    Tensor d = dst;  // alias of the slot tensor's storage
    d.copy_(it->second);
  }
  return res;
}

}  // namespace minidl::nn
