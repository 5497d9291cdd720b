// Containers: Sequential (chains single-input modules) and ModuleList (indexable list of
// modules, no forward). Children are named "0", "1", ... like PyTorch.
#pragma once

#include <initializer_list>
#include <memory>
#include <vector>

#include "nn/module.h"

namespace minidl::nn {

class Sequential : public Cloneable<Sequential> {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  explicit Sequential(const std::vector<std::shared_ptr<Module>>& modules);

  void push_back(std::shared_ptr<Module> m);
  std::shared_ptr<Module> operator[](int64_t i) const;  // negative counts from the end
  int64_t size() const { return int64_t(children().size()); }
  bool empty() const { return size() == 0; }
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Sequential"; }
};

class ModuleList : public Cloneable<ModuleList> {
 public:
  ModuleList() = default;
  ModuleList(std::initializer_list<std::shared_ptr<Module>> modules);

  void push_back(std::shared_ptr<Module> m);
  std::shared_ptr<Module> operator[](int64_t i) const;
  int64_t size() const { return int64_t(children().size()); }
  bool empty() const { return size() == 0; }
  // Iteration over a snapshot: `for (auto& m : list.items())`.
  std::vector<std::shared_ptr<Module>> items() const { return children(); }
  std::string name() const override { return "ModuleList"; }
};

}  // namespace minidl::nn
