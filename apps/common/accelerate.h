// The apps' bridge to the Accelerator (parallel/accelerator/accelerator.h): AcceleratorOptions from
// the shared flags, the AMP wording of their progress lines, and evaluation forwards under the AMP
// level.
#pragma once
#include <string>

#include "apps/common/run_options.h"
#include "minidl.h"
#include "parallel/accelerator/accelerator.h"

namespace minidl::apps {

// The Accelerator's options from the shared flags (--mode, --device, --dp-devices, --backend,
// --init-method, --dist-timeout, --amp, --opt-level, --init-scale, --seed, --threads); throws
// the one-line error of inconsistent AMP flags.
AcceleratorOptions accelerator_options(const RunOptions& o);

// "amp fp16 O1", or "" with AMP off.
std::string amp_name(const Accelerator& acc);
// For the start line: "amp fp16 O1 (loss scale 65536)".
std::string amp_describe(const Accelerator& acc);
// For the epoch / eval and summary lines: ", scale 32768, 2 skipped" ("" with AMP off).
std::string amp_suffix(const Accelerator& acc);
int64_t amp_skipped_steps(const Accelerator& acc);

// The unwrapped model on x for evaluation, inside the AMP level's autocast region with its input
// casting; the output in f32.
Tensor eval_forward(const Accelerator& acc, const Tensor& x);

}  // namespace minidl::apps
