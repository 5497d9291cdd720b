// Sequential, ModuleList and ModuleDict: children are owned by Module (add_module)
// so clone() deep-copies them through Module's generic machinery.
#include "nn/container.h"

#include <cxxabi.h>

#include <cstdlib>
#include <string>

namespace minidl::nn {

namespace detail {
std::string type_name(const std::type_info& t) {
  int status = 0;
  char* dem = abi::__cxa_demangle(t.name(), nullptr, nullptr, &status);
  std::string s = (status == 0 && dem) ? dem : t.name();
  std::free(dem);
  std::string base = s.substr(0, s.find('<'));
  auto colon = base.rfind("::");
  return colon == std::string::npos ? s : s.substr(colon + 2);
}

std::shared_ptr<Module> child_at_index(const Module& m, int64_t i, const char* what) {
  auto kids = m.children();
  int64_t n = int64_t(kids.size());
  MINIDL_CHECK(i >= -n && i < n, what, ": index ", i, " is out of range for a container of size ",
               n);
  return kids[size_t(i < 0 ? i + n : i)];
}
}  // namespace detail

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) push_back(m);
}

Sequential::Sequential(const std::vector<std::shared_ptr<Module>>& modules) {
  for (auto& m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> m) {
  MINIDL_CHECK(m != nullptr, "Sequential.push_back: null module");
  add_module(std::to_string(size()), std::move(m));
}

std::shared_ptr<Module> Sequential::operator[](int64_t i) const {
  return detail::child_at_index(*this, i, "Sequential");
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& m : children()) y = (*m)(y);  // through operator(): each child's hooks run
  return y;
}

ModuleList::ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) push_back(m);
}

void ModuleList::push_back(std::shared_ptr<Module> m) {
  MINIDL_CHECK(m != nullptr, "ModuleList.push_back: null module");
  add_module(std::to_string(size()), std::move(m));
}

std::shared_ptr<Module> ModuleList::operator[](int64_t i) const {
  return detail::child_at_index(*this, i, "ModuleList");
}

ModuleDict::ModuleDict(
    std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules) {
  for (auto& [k, m] : modules) insert(k, m);
}

void ModuleDict::insert(const std::string& key, std::shared_ptr<Module> m) {
  MINIDL_CHECK(m != nullptr, "ModuleDict: module for key '", key, "' is null");
  if (contains(key))
    replace_owned_module(key, std::move(m));
  else
    add_module(key, std::move(m));
}

std::shared_ptr<Module> ModuleDict::operator[](const std::string& key) const {
  for (auto& [k, m] : named_children())
    if (k == key) return m;
  std::string have;
  for (auto& k : keys()) have += (have.empty() ? "'" : ", '") + k + "'";
  MINIDL_FAIL("ModuleDict: no key '", key, "' (keys: ", have.empty() ? "none" : have, ")");
}

bool ModuleDict::contains(const std::string& key) const {
  for (auto& [k, m] : named_children())
    if (k == key) return true;
  return false;
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (auto& [k, m] : named_children()) out.push_back(k);
  return out;
}

}  // namespace minidl::nn
