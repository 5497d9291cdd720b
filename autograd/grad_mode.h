// Grad mode: a thread-local switch for recording autograd history (torch.no_grad()).
#pragma once

namespace minidl {

struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// RAII: disables history recording in this thread for its lifetime.
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// RAII: sets grad mode to `enabled` for its lifetime (torch.set_grad_enabled).
class AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled) : prev_(GradMode::is_enabled()) {
    GradMode::set_enabled(enabled);
  }
  ~AutoGradMode() { GradMode::set_enabled(prev_); }
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool prev_;
};

// RAII: torch.inference_mode(enabled). Enabled, it disables history recording (NoGradGuard
// semantics) and sets a thread-local flag, InferenceMode::is_enabled(), for code that wants to
// skip training-only work; InferenceMode(false) clears the flag and leaves grad mode as it is.
// Differences from PyTorch, where tensors created inside are "inference tensors": here they
// are ordinary tensors (marking them needs a flag on TensorImpl, tensor/tensor.h), so
//  * using one later in autograd works (torch: "Inference tensors cannot be saved for
//    backward"), and requires_grad_() on one is allowed (torch refuses it outside the mode);
//  * in-place updates to one outside the mode are allowed (torch refuses them);
//  * there is no is_inference() query, and no saving beyond no_grad's: version counters and
//    view metadata are kept as usual (torch skips them inside the mode).
class InferenceMode {
 public:
  explicit InferenceMode(bool enabled = true) : prev_grad_(GradMode::is_enabled()), prev_(flag()) {
    if (enabled) GradMode::set_enabled(false);
    flag() = enabled;
  }
  ~InferenceMode() {
    GradMode::set_enabled(prev_grad_);
    flag() = prev_;
  }
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;
  static bool is_enabled() { return flag(); }

 private:
  static bool& flag() {
    thread_local bool on = false;
    return on;
  }
  bool prev_grad_, prev_;
};

}  // namespace minidl
