// Shared pieces of the fuzz targets: the per-process scratch directory and the model, optimizer
// and scheduler that fuzz_checkpoint loads checkpoints into.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "autograd/grad_mode.h"
#include "fuzz_targets.h"
#include "nn/activation.h"
#include "nn/linear_conv.h"
#include "autograd/ops.h"
#include "tensor/random.h"

namespace minidl::fuzz {
namespace fs = std::filesystem;

std::string write_scratch(const std::string& name, const void* data, size_t size) {
  struct ScratchDir {
    fs::path path = fs::temp_directory_path() / ("minidl_fuzz_" + std::to_string(::getpid()));
    ScratchDir() { fs::create_directories(path); }
    ~ScratchDir() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  };
  static const ScratchDir dir;
  const std::string p = (dir.path / name).string();
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(data), std::streamsize(size));
  f.close();
  if (!f) throw std::runtime_error("fuzz: cannot write scratch file '" + p + "'");
  return p;
}

CheckpointTarget::CheckpointTarget() {
  Generator gen(42);
  model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(3, 2, true, &gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(2, 2, true, &gen)});
  opt = std::make_unique<optim::Adam>(model->parameters(), 0.01);
  sched = std::make_unique<optim::StepLR>(*opt, 2, 0.5);
}

void CheckpointTarget::train_step() {
  Tensor x = arange(0, 6, 1, kFloat32).reshape({2, 3});
  Tensor y = ones({2, 2}, kFloat32);
  opt->zero_grad();
  Tensor d = sub((*model)(x), y);
  mean(mul(d, d)).backward();
  opt->step();
  sched->step();
}

}  // namespace minidl::fuzz
