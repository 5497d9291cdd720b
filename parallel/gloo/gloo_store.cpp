// GlooStore: forwards Gloo's rendezvous key exchange to a minidl Store (compiled only when
// Gloo was found; see MINIDL_WITH_GLOO in the top CMakeLists.txt).
#if MINIDL_WITH_GLOO
#include "parallel/gloo/gloo_store.h"

#include "tensor/error.h"

namespace minidl::dist {

GlooStore::GlooStore(std::shared_ptr<dist::Store> store, std::string prefix)
    : store_(std::move(store)), prefix_(std::move(prefix)) {
  MINIDL_CHECK(store_ != nullptr, "GlooStore: the wrapped store is null");
}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  store_->set(prefix_ + key, Bytes(data.begin(), data.end()));
}

std::vector<char> GlooStore::get(const std::string& key) {
  Bytes value = store_->get(prefix_ + key);
  return std::vector<char>(value.begin(), value.end());
}

std::vector<std::string> GlooStore::prefixed(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const std::string& k : keys) out.push_back(prefix_ + k);
  return out;
}

void GlooStore::wait(const std::vector<std::string>& keys) {
  store_->wait(prefixed(keys), store_->timeout());
}

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  store_->wait(prefixed(keys), timeout.count() > 0 ? timeout : store_->timeout());
}

}  // namespace minidl::dist
#endif  // MINIDL_WITH_GLOO
