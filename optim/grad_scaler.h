// Dynamic loss scaling for fp16 mixed precision (torch.cuda.amp.GradScaler): PyTorch's
// algorithm and per-optimizer state machine, plus skip counters, warnings and checks.
#pragma once
#include <functional>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "optim/optimizer.h"
#include "tensor/tensor.h"

namespace minidl::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
  double min_scale = 1.0 / 65536;       // update() throws when the scale falls below (0: never)
  int64_t warn_consecutive_skips = 10;  // stderr warning once per streak of skips (0: never)
  int rank = -1;                        // named in messages; -1: unknown
  // Sharded training (FSDP's ShardedGradScaler, dist::sharded_grad_scaler): each rank sees only
  // its shards' gradients, so the inf/NaN flag (0-d f32) is made every rank's maximum here
  // before any rank decides to step or skip. Unset: the local flag decides.
  std::function<void(Tensor& found_inf)> reduce_found_inf = nullptr;
};

// Usage, per iteration (PyTorch order):
//   scaler.scale(loss).backward();
//   scaler.clip_grad_norm_(opt, 1.0);          // optional: unscales first, exactly once
//   if (scaler.step(opt)) scheduler.step();     // step() returns false when it skipped
//   scaler.update();
// The scale (0-d f32) and growth tracker (0-d int32) live on the loss's device. step() reads
// found_inf on the host once (PyTorch's only sync); an optimizer whose supports_amp_scaling()
// is true (fused CUDA SGD/Adam/AdamW) gets grad_scale/found_inf and skips on the device. While a
// CUDA graph is being captured step() does not read found_inf: it returns true, the counters
// and warnings are not updated and update() runs entirely on the device.
// LR schedulers are the caller's business: step them only when step() returned true.
// bf16 needs no scaler (its exponent range is f32's): GradScaler::for_dtype(kBFloat16) is a
// disabled scaler (scale 1.0, pass-through); an fp16 loop without a scaler should call
// warn_fp16_without_scaler().
class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions o = {});
  // A scaler for training in `dt`: enabled for f16, disabled (a no-op at scale 1.0) otherwise.
  static GradScaler for_dtype(DType dt, GradScalerOptions o = {});
  static bool needs_scaler(DType dt) { return dt == kFloat16; }

  // loss * scale. Also records on the device whether the loss is inf/NaN (reported by step()
  // when it skips, with the step and rank; no extra sync).
  Tensor scale(const Tensor& loss);
  // Divides the optimizer's grads by the scale (inv = 1/scale in f64, cast to f32) and records
  // inf/NaN. At most once per optimizer between update()s, never after step(); fp16 grads are
  // rejected ("Attempting to unscale FP16 gradients.").
  void unscale_(optim::Optimizer& opt);
  // Unscales if needed; applies opt.step() only if the grads are finite. Returns whether the
  // step was applied (skipped steps are counted).
  bool step(optim::Optimizer& opt);
  // Backs off (found inf) or grows the scale, then resets the per-optimizer state; new_scale
  // overrides the scale. Throws when the scale fell below min_scale.
  void update(std::optional<double> new_scale = std::nullopt);
  // Unscales first (unless already unscaled this step), then clips the optimizer's params
  // (optim::clip_grad_norm_); returns the total norm (0-d tensor on the device, not read back).
  Tensor clip_grad_norm_(optim::Optimizer& opt, double max_norm, double norm_type = 2.0);

  double get_scale() const;     // 1.0 when disabled; reads the device scale (a sync)
  Tensor scale_tensor() const;  // undefined before the first scale() or when disabled
  int64_t growth_tracker() const;
  bool is_enabled() const { return opt_.enabled; }
  const GradScalerOptions& options() const { return opt_; }

  int64_t steps() const { return steps_; }  // update() calls
  int64_t skipped_steps() const { return skipped_; }
  int64_t consecutive_skips() const { return consecutive_; }
  bool last_step_skipped() const { return last_skipped_; }

  // "scale" (0-d f32), "growth_factor", "backoff_factor" (0-d f64), "growth_interval",
  // "_growth_tracker" (0-d int64), and "minidl.steps", "minidl.skipped_steps",
  // "minidl.consecutive_skips" (0-d int64). Empty when disabled.
  std::map<std::string, Tensor> state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& sd);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct PerOpt {
    Stage stage = Stage::kReady;
    Tensor found_inf;  // 0-d f32 on the scale's device
    int found = -1;    // step()'s host read of found_inf: 0/1, -1 not read
  };
  PerOpt& state_of(optim::Optimizer& opt);
  void lazy_init(Device dev);
  // The optimizer's defined grads, checked (no fp16, on the scale's device).
  void check_grads(optim::Optimizer& opt, std::vector<Tensor>& grads);
  bool read_found_inf(const Tensor& found_inf);  // the sync; reports a non-finite loss
  void record_skip(bool skipped);
  std::string where() const;  // "step N" or "step N (rank r)"

  GradScalerOptions opt_;
  Tensor scale_;           // 0-d f32
  Tensor growth_tracker_;  // 0-d int32
  Tensor loss_nonfinite_;  // 0-d f32: a scaled loss since the last update() was inf/NaN
  Tensor one_;             // 0-d f32 1.0: inv_scale of check-only passes
  std::unordered_map<optim::Optimizer*, PerOpt> per_opt_;
  // Host mirror of the scale and tracker (the kernel's arithmetic on step()'s host read of
  // found_inf) for the min_scale check without a sync; unknown after a captured step.
  float host_scale_ = 0;
  int64_t host_tracker_ = 0;
  bool host_known_ = true;
  bool loss_reported_ = false;
  int64_t steps_ = 0, skipped_ = 0, consecutive_ = 0;
  bool last_skipped_ = false, warned_streak_ = false;
};

// Warns once per process on stderr that an fp16 training loop runs without a GradScaler
// (gradients underflow to zero); `where` names the caller (e.g. the app).
void warn_fp16_without_scaler(const std::string& where = "");

}  // namespace minidl::amp
