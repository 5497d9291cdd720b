// Adapter that lets Gloo rendezvous through minidl's Store: a gloo::rendezvous::Store whose
// set / get / wait forward to a (usually TCP) Store, optionally under a key prefix so that
// several Gloo contexts can share one store. Only available when minidl is built with Gloo.
#pragma once
#include <gloo/rendezvous/store.h>

#include <memory>
#include <string>

#include "parallel/store/store.h"

namespace minidl::dist {

class GlooStore : public gloo::rendezvous::Store {
 public:
  explicit GlooStore(std::shared_ptr<dist::Store> store, std::string prefix = "gloo/");

  void set(const std::string& key, const std::vector<char>& data) override;
  // Blocks until the key exists, bounded by the wrapped store's timeout.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  // gloo::kNoTimeout (zero) means the wrapped store's timeout: waits are always bounded.
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  dist::Store& store() { return *store_; }

 private:
  std::vector<std::string> prefixed(const std::vector<std::string>& keys) const;

  std::shared_ptr<dist::Store> store_;
  std::string prefix_;
};

}  // namespace minidl::dist
