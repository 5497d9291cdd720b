// ModuleWrapper: transparent registration of a wrapped module's children and direct tensors.
#include "parallel/module_wrapper.h"

namespace minidl::dist {

ModuleWrapper::ModuleWrapper(std::shared_ptr<nn::Module> module, const char* wrapper_name)
    : module_(std::move(module)), wrapper_name_(wrapper_name) {
  MINIDL_CHECK(module_ != nullptr, wrapper_name_, ": the module to wrap is null");
  size_t used = 0;
  auto alias = [&](const Tensor& t) -> Tensor* {
    MINIDL_CHECK(used < kMaxDirect, wrapper_name_, ": the wrapped module ", module_->name(),
                 " has more than ", kMaxDirect,
                 " direct parameters and buffers; move them into a child module");
    direct_[used] = t;
    return &direct_[used++];
  };
  for (const auto& [name, p] : module_->named_parameters(false))
    register_parameter(name, alias(p), p.requires_grad());
  for (const auto& [name, b] : module_->named_buffers(false)) register_buffer(name, alias(b));
  for (const auto& [name, child] : module_->named_children()) add_module(name, child);
  Module::train(module_->is_training());
}

void ModuleWrapper::train(bool on) {
  Module::train(on);
  module_->train(on);
}

}  // namespace minidl::dist
