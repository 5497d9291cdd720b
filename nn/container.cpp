// Sequential and ModuleList: children are owned by Module (owning register_module) so clone()
// deep-copies them through Module's generic machinery.
#include "nn/container.h"

#include <string>

namespace minidl::nn {

namespace {
std::shared_ptr<Module> at(const Module& m, int64_t i, const char* what) {
  auto kids = m.children();
  int64_t n = int64_t(kids.size());
  MINIDL_CHECK(i >= -n && i < n, what, ": index ", i, " is out of range for a container of size ",
               n);
  return kids[size_t(i < 0 ? i + n : i)];
}
}  // namespace

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) push_back(m);
}

Sequential::Sequential(const std::vector<std::shared_ptr<Module>>& modules) {
  for (auto& m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> m) {
  MINIDL_CHECK(m != nullptr, "Sequential.push_back: null module");
  register_module(std::to_string(size()), std::move(m));
}

std::shared_ptr<Module> Sequential::operator[](int64_t i) const {
  return at(*this, i, "Sequential");
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& m : children()) y = m->forward(y);
  return y;
}

ModuleList::ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) push_back(m);
}

void ModuleList::push_back(std::shared_ptr<Module> m) {
  MINIDL_CHECK(m != nullptr, "ModuleList.push_back: null module");
  register_module(std::to_string(size()), std::move(m));
}

std::shared_ptr<Module> ModuleList::operator[](int64_t i) const {
  return at(*this, i, "ModuleList");
}

}  // namespace minidl::nn
