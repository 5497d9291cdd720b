// The apps' Accelerator glue (see accelerate.h).
#include "apps/common/accelerate.h"

#include <cstdio>

#include "optim/amp.h"

namespace minidl::apps {

AcceleratorOptions accelerator_options(const RunOptions& o) {
  std::string why = amp_flags_error(o);
  MINIDL_CHECK(why.empty(), why);
  AcceleratorOptions a;
  a.mode = o.mode;
  a.device = o.device;
  a.devices = o.dp_devices;
  a.backend = o.backend;
  a.init_method = o.init_method;
  a.timeout_s = o.dist_timeout_s;
  a.amp = o.amp;
  a.opt_level = o.opt_level;
  a.init_scale = o.init_scale;
  a.fsdp = o.fsdp;
  a.seed = o.seed;
  a.threads = o.threads;
  a.verbose = !o.quiet;
  return a;
}

std::string amp_name(const Accelerator& acc) {
  if (!acc.amp()) return "";
  return "amp " + acc.options().amp + " " +
         std::string(amp::opt_level_name(acc.amp()->opt_level()));
}

std::string amp_describe(const Accelerator& acc) {
  std::string s = amp_name(acc);
  if (acc.amp() && acc.amp()->scaling()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " (loss scale %g)", acc.amp()->scaler().get_scale());
    s += buf;
  }
  return s;
}

std::string amp_suffix(const Accelerator& acc) {
  if (!acc.amp()) return "";
  char buf[96];
  std::snprintf(buf, sizeof buf, ", scale %g, %lld skipped", acc.amp()->scaler().get_scale(),
                (long long)acc.amp()->scaler().skipped_steps());
  return buf;
}

int64_t amp_skipped_steps(const Accelerator& acc) {
  return acc.amp() ? acc.amp()->scaler().skipped_steps() : 0;
}

Tensor eval_forward(const Accelerator& acc, const Tensor& x) {
  // FSDP's units gather their parameters around each forward: it evaluates through the wrapper.
  nn::Module& model = acc.fsdp() ? acc.model() : acc.unwrap_model();
  if (!acc.amp()) return model(x);
  auto region = acc.amp()->autocast_region();
  return acc.amp()->forward(model, x).to(kFloat32);
}

}  // namespace minidl::apps
