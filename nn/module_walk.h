// Internal to nn/module*.cpp: the name join and the module-tree walk that traversal, state
// dicts and clone share. Not part of the public API.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "nn/module.h"

namespace minidl::nn::detail {

inline std::string join_name(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// Visits (module, prefix) for this module and all descendants (each module once).
template <class F>
void visit(const Module& root, bool recurse, F&& f) {
  f(root, std::string());
  if (!recurse) return;
  std::vector<const Module*> seen{&root};
  struct Walker {
    static void walk(const Module& m, const std::string& prefix, std::vector<const Module*>& seen,
                     F& f) {
      for (auto& [n, c] : m.named_children()) {
        if (std::find(seen.begin(), seen.end(), c.get()) != seen.end()) continue;
        seen.push_back(c.get());
        std::string full = join_name(prefix, n);
        f(*c, full);
        walk(*c, full, seen, f);
      }
    }
  };
  Walker::walk(root, "", seen, f);
}

}  // namespace minidl::nn::detail
