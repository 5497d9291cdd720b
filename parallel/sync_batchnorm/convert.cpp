// convert_sync_batchnorm / revert_sync_batchnorm: every BatchNorm1d/2d of a model swapped for a
// SyncBatchNorm sharing its tensors, and back.
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "parallel/sync_batchnorm/sync_batchnorm.h"

namespace minidl::nn {

namespace {

// Replaces, depth-first, every module for which `make` returns a replacement; a module shared
// by several parents is replaced once and stays shared.
struct Replacer {
  using Make = std::function<std::shared_ptr<Module>(const std::shared_ptr<Module>&)>;
  const char* what;  // the public function's name, for errors
  Make make;
  // For a member slot whose C++ type cannot hold make's result: a replacement of the old
  // module's own class (null: none).
  Make make_same_class;
  std::unordered_map<const Module*, std::shared_ptr<Module>> done, done_same_class;
  std::unordered_set<const Module*> visited;

  std::shared_ptr<Module> replacement(const std::shared_ptr<Module>& m) {
    auto it = done.find(m.get());
    if (it != done.end()) return it->second;
    std::shared_ptr<Module> r = make(m);
    if (r) {
      r->train(m->is_training());
      done[m.get()] = r;
    }
    return r;
  }

  void replace_children(Module& parent, const std::string& prefix) {
    if (!visited.insert(&parent).second) return;
    for (auto& [name, child] : parent.named_children()) {
      const std::string path = prefix.empty() ? name : prefix + "." + name;
      if (auto r = replacement(child)) {
        try {
          parent.replace_module(name, r);
        } catch (const Error& e) {
          std::shared_ptr<Module>& same = done_same_class[child.get()];
          if (!same && make_same_class) {
            same = make_same_class(child);
            if (same) same->train(child->is_training());
          }
          if (!same) MINIDL_FAIL(what, ": cannot replace '", path, "': ", e.what());
          parent.replace_module(name, same);
        }
      } else {
        replace_children(*child, path);
      }
    }
  }

  std::shared_ptr<Module> run(std::shared_ptr<Module> root) {
    MINIDL_CHECK(root != nullptr, what, ": the module is null");
    if (auto r = replacement(root)) return r;
    replace_children(*root, "");
    return root;
  }
};

}  // namespace

std::shared_ptr<Module> convert_sync_batchnorm(std::shared_ptr<Module> module,
                                               std::shared_ptr<dist::ProcessGroup> process_group) {
  Replacer r{"convert_sync_batchnorm",
             [&process_group](const std::shared_ptr<Module>& m) {
               const BatchNormState* s = nullptr;
               auto* b1 = dynamic_cast<const BatchNorm1d*>(m.get());
               if (b1) s = b1;
               if (auto* b2 = dynamic_cast<const BatchNorm2d*>(m.get())) s = b2;
               if (!s) return std::shared_ptr<Module>();
               auto sync = std::make_shared<SyncBatchNorm>(s->num_features, s->opt, process_group);
               detail::share_batchnorm_tensors(*sync, *s);
               sync->from_batchnorm1d = b1 != nullptr;
               return std::shared_ptr<Module>(sync);
             },
             [&process_group](const std::shared_ptr<Module>& m) {
               if (auto* b1 = dynamic_cast<const BatchNorm1d*>(m.get()))
                 return std::shared_ptr<Module>(
                     std::make_shared<SyncBatchNormIn<BatchNorm1d>>(*b1, process_group));
               if (auto* b2 = dynamic_cast<const BatchNorm2d*>(m.get()))
                 return std::shared_ptr<Module>(
                     std::make_shared<SyncBatchNormIn<BatchNorm2d>>(*b2, process_group));
               return std::shared_ptr<Module>();
             },
             {},
             {},
             {}};
  return r.run(std::move(module));
}

namespace {

// A plain BN sharing `s`'s tensors.
template <class BN>
std::shared_ptr<Module> plain_batchnorm(const BatchNormState& s) {
  auto bn = std::make_shared<BN>(s.num_features, s.opt);
  detail::share_batchnorm_tensors(*bn, s);
  return bn;
}

}  // namespace

std::shared_ptr<Module> revert_sync_batchnorm(std::shared_ptr<Module> module) {
  Replacer r{"revert_sync_batchnorm",
             [](const std::shared_ptr<Module>& m) -> std::shared_ptr<Module> {
               if (auto* in1 = dynamic_cast<const SyncBatchNormIn<BatchNorm1d>*>(m.get()))
                 return plain_batchnorm<BatchNorm1d>(*in1);
               if (auto* in2 = dynamic_cast<const SyncBatchNormIn<BatchNorm2d>*>(m.get()))
                 return plain_batchnorm<BatchNorm2d>(*in2);
               auto* sync = dynamic_cast<const SyncBatchNorm*>(m.get());
               if (!sync) return nullptr;
               return sync->from_batchnorm1d ? plain_batchnorm<BatchNorm1d>(*sync)
                                             : plain_batchnorm<BatchNorm2d>(*sync);
             },
             {},
             {},
             {},
             {}};
  return r.run(std::move(module));
}

}  // namespace minidl::nn
