// ModuleWrapper: the base of DistributedDataParallel and DataParallel. It wraps a module
// transparently: the wrapper's parameters, buffers, children and state_dict carry the inner
// module's names with no "module." prefix, so checkpoints load into an unwrapped model.
#pragma once
#include <memory>
#include <string>

#include "nn/module.h"

namespace minidl::dist {

// The wrapper registers the inner module's children (shared, not copied) and aliases of its
// own direct parameters and buffers (at most kMaxDirect). Do not replace the inner module's
// direct tensors after wrapping (PyTorch forbids changing parameters after wrapping too).
class ModuleWrapper : public nn::Module {
 public:
  ModuleWrapper(std::shared_ptr<nn::Module> module, const char* wrapper_name);
  nn::Module& module() const { return *module_; }
  const std::shared_ptr<nn::Module>& module_ptr() const { return module_; }
  void train(bool on = true) override;
  std::string name() const override { return wrapper_name_; }

 protected:
  std::shared_ptr<nn::Module> module_;

 private:
  static constexpr size_t kMaxDirect = 32;
  std::string wrapper_name_;
  Tensor direct_[kMaxDirect];  // aliases of module_'s own (non-child) parameters and buffers
};

}  // namespace minidl::dist
