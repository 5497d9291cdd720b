// Training checkpoints: model + optimizer + LR scheduler + default RNG state in ONE safetensors
// file (written atomically), and plain model weights files readable by PyTorch / Hugging Face.
#pragma once
#include <map>
#include <string>

#include "nn/module.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"

namespace minidl::nn {

// Writes `path` atomically (temporary file, fsync, rename: a failed write leaves any previous
// file intact). Keys: "model.<state_dict name>", "optimizer.<key>", "scheduler.<key>" and
// "rng.seed"/"rng.offset" (0-d int64 holding the uint64 bits of default_generator()'s state),
// and "amp.<key>" when `amp` is given (amp::Amp::state_dict: scale, growth tracker, skip
// counters, fp32 master weights).
// Metadata: {"format": "minidl-checkpoint", "version": "1"} plus `extra` (which may not redefine
// "format" or "version").
void save_checkpoint(const std::string& path, Module& model, optim::Optimizer* opt = nullptr,
                     optim::LRScheduler* sched = nullptr,
                     const std::map<std::string, std::string>& extra = {},
                     const std::map<std::string, Tensor>* amp = nullptr);

// The same file from a model's state dict: an FSDP model's full_state_dict() saved under the
// names a plain model saves, so the file loads into the plain model.
void save_checkpoint(const std::string& path, const StateDict& model_state,
                     optim::Optimizer* opt = nullptr, optim::LRScheduler* sched = nullptr,
                     const std::map<std::string, std::string>& extra = {},
                     const std::map<std::string, Tensor>* amp = nullptr);

// Restores what save_checkpoint wrote and returns the file's metadata. The whole file is read
// and validated first; if anything fails (unreadable/truncated/corrupted file, not a minidl
// checkpoint, missing/unexpected keys with `strict`, shape mismatch, missing optimizer or
// scheduler state that was asked for) a minidl::Error naming the file is thrown and the model,
// optimizer, scheduler and default generator are left unchanged. A "module." prefix on every
// model key (DataParallel) is stripped with a warning. With strict=false unknown sections and a
// missing RNG state are ignored and model keys are matched leniently (load_state_dict).
// `amp` (when given) receives the "amp." section, empty when the file has none; the caller
// applies it. Without `amp`, an "amp." section is ignored.
std::map<std::string, std::string> load_checkpoint(const std::string& path, Module& model,
                                                   optim::Optimizer* opt = nullptr,
                                                   optim::LRScheduler* sched = nullptr,
                                                   bool strict = true,
                                                   std::map<std::string, Tensor>* amp = nullptr);

// Plain weights: keys = state_dict names (no prefix), metadata {"format": "pt"} like
// Hugging Face's safetensors files; loadable with safetensors.torch.load_file.
void save_weights(const std::string& path, const Module& model);
// Loads a plain weights file (errors name the file; the model is unchanged on failure).
LoadStateDictResult load_weights(const std::string& path, Module& model, bool strict = true);

}  // namespace minidl::nn
