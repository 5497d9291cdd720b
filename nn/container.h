// Containers: Sequential (chains single-input modules), ModuleList / ModuleListOf<T> (indexable
// lists, untyped / typed, no forward) and ModuleDict (modules by name, insertion order).
// Children are named "0", "1", ... (lists) or by key (dict), like PyTorch.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace minidl::nn {

namespace detail {
// The demangled, namespace-free name of a C++ type ("Linear").
std::string type_name(const std::type_info& t);
// Child i of m (negative counts from the end), range-checked.
std::shared_ptr<Module> child_at_index(const Module& m, int64_t i, const char* what);
// m cast to T, or an error naming `where` and m's actual type.
template <class T>
std::shared_ptr<T> cast_child(std::shared_ptr<Module> m, const char* what,
                              const std::string& where) {
  auto typed = std::dynamic_pointer_cast<T>(m);
  MINIDL_CHECK(typed != nullptr, what, ": element ", where, " is a ", m->name(), " (",
               type_name(typeid(*m)), "), not a ", type_name(typeid(T)));
  return typed;
}

// Iterator over a container's children as std::shared_ptr<T> (by index, so it sees the
// container as it is when dereferenced; `for (auto& m : list)` binds to the cached element).
template <class T>
class ChildIterator {
 public:
  ChildIterator(const Module* m, int64_t i, const char* what) : m_(m), i_(i), what_(what) {}
  const std::shared_ptr<T>& operator*() const {
    cur_ = cast_child<T>(child_at_index(*m_, i_, what_), what_, std::to_string(i_));
    return cur_;
  }
  ChildIterator& operator++() {
    ++i_;
    return *this;
  }
  bool operator==(const ChildIterator& o) const { return m_ == o.m_ && i_ == o.i_; }
  bool operator!=(const ChildIterator& o) const { return !(*this == o); }

 private:
  const Module* m_;
  int64_t i_;
  const char* what_;
  mutable std::shared_ptr<T> cur_;
};
}  // namespace detail

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

// Untyped list: `list[i]` is a std::shared_ptr<Module>; `list.get<Linear>(i)` casts, throwing
// with the index and the actual type on a mismatch.
class ModuleList : public Cloneable<ModuleList> {
 public:
  ModuleList() = default;
  ModuleList(std::initializer_list<std::shared_ptr<Module>> modules);

  void push_back(std::shared_ptr<Module> m);
  std::shared_ptr<Module> operator[](int64_t i) const;
  template <class T>
  std::shared_ptr<T> get(int64_t i) const {
    return detail::cast_child<T>((*this)[i], "ModuleList.get", std::to_string(i));
  }
  int64_t size() const { return int64_t(children().size()); }
  bool empty() const { return size() == 0; }
  // Iteration over a snapshot: `for (auto& m : list.items())`.
  std::vector<std::shared_ptr<Module>> items() const { return children(); }
  detail::ChildIterator<Module> begin() const { return {this, 0, "ModuleList"}; }
  detail::ChildIterator<Module> end() const { return {this, size(), "ModuleList"}; }
  std::string name() const override { return "ModuleList"; }
};

// Typed list (prints as ModuleList; same "0", "1", ... names): `h[i]` and `for (auto& b : h)`
// give std::shared_ptr<T>, so modules with multi-tensor forwards are called directly.
// clone() keeps the type: the clone's elements are clones of type T.
template <class T>
class ModuleListOf : public Cloneable<ModuleListOf<T>> {
 public:
  static_assert(std::is_base_of_v<Module, T>, "ModuleListOf<T>: T must derive from nn::Module");
  ModuleListOf() = default;
  ModuleListOf(std::initializer_list<std::shared_ptr<T>> modules) {
    for (auto& m : modules) push_back(m);
  }

  void push_back(std::shared_ptr<T> m) {
    MINIDL_CHECK(m != nullptr, "ModuleList.push_back: null module");
    this->add_module(std::to_string(size()), std::shared_ptr<Module>(std::move(m)));
  }
  std::shared_ptr<T> operator[](int64_t i) const {
    return detail::cast_child<T>(detail::child_at_index(*this, i, "ModuleList"), "ModuleList",
                                 std::to_string(i));
  }
  int64_t size() const { return int64_t(this->children().size()); }
  bool empty() const { return size() == 0; }
  detail::ChildIterator<T> begin() const { return {this, 0, "ModuleList"}; }
  detail::ChildIterator<T> end() const { return {this, size(), "ModuleList"}; }
  std::string name() const override { return "ModuleList"; }
};

// Modules by string key in insertion order (torch.nn.ModuleDict); each child is named by its
// key, so parameters are "<key>.<param>". Assigning an existing key replaces that module in
// place (its position is kept).
class ModuleDict : public Cloneable<ModuleDict> {
 public:
  ModuleDict() = default;
  ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules);

  // Adds `m` under `key` (a valid attribute name: non-empty, no '.'), or replaces it.
  void insert(const std::string& key, std::shared_ptr<Module> m);
  std::shared_ptr<Module> operator[](const std::string& key) const;  // throws on a missing key
  template <class T>
  std::shared_ptr<T> get(const std::string& key) const {
    return detail::cast_child<T>((*this)[key], "ModuleDict.get", "'" + key + "'");
  }
  bool contains(const std::string& key) const;
  int64_t size() const { return int64_t(children().size()); }
  bool empty() const { return size() == 0; }
  std::vector<std::string> keys() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> items() const {
    return named_children();
  }
  std::vector<std::shared_ptr<Module>> values() const { return children(); }
  std::string name() const override { return "ModuleDict"; }
};

}  // namespace minidl::nn
