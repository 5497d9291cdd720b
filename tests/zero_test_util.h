// Shared by the ZeroRedundancyOptimizer tests: a small MLP, one DDP training step, plain and
// ZeRO optimizers by kind, bitwise and max-difference comparisons, a temporary directory.
#pragma once
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "ddp_test_util.h"
#include "parallel/zero/zero_redundancy_optimizer.h"
#include "parallel_test_models.h"

namespace zerotest {
using namespace minidl;
using namespace minidl::dist;

// x:[B,16] -> 32 -> 32 -> 32 -> 10: eight parameters of balanced sizes (1024, 1024, 512, 320,
// and biases), so the partition is close to even on 2 and 3 ranks.
class Mlp : public nn::Cloneable<Mlp> {
 public:
  explicit Mlp(int64_t hidden = 32) {
    fc1 = std::make_shared<nn::Linear>(16, hidden);
    fc2 = std::make_shared<nn::Linear>(hidden, 32);
    fc3 = std::make_shared<nn::Linear>(32, 32);
    fc4 = std::make_shared<nn::Linear>(32, 10);
    register_module("fc1", &fc1);
    register_module("fc2", &fc2);
    register_module("fc3", &fc3);
    register_module("fc4", &fc4);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu(fc1->forward(x));
    h = relu(fc2->forward(h));
    h = relu(fc3->forward(h));
    return fc4->forward(h);
  }
  std::string name() const override { return "Mlp"; }
  std::shared_ptr<nn::Linear> fc1, fc2, fc3, fc4;
};

inline constexpr int64_t kRows = 12;  // global batch (divisible by 2 and 3)

// One DDP step of `opt` on this rank's slice of global batch `step`.
inline void train_step(nn::Module& ddp, optim::Optimizer& opt, int step, int rank, int world) {
  const int64_t per = kRows / world;
  Tensor x = testutil::random_tensor({kRows, 16}, kFloat32, 3000 + uint64_t(step));
  Tensor y = testutil::random_tensor({kRows}, kInt64, 4000 + uint64_t(step), 0, 10);
  opt.zero_grad();
  ptest::loss_of(ddp, x.narrow(0, rank * per, per), y.narrow(0, rank * per, per)).backward();
  opt.step();
}

enum class Kind { adam, adamw, sgd };
inline const char* kind_name(Kind k) {
  return k == Kind::adam ? "Adam" : k == Kind::adamw ? "AdamW" : "SGD";
}

inline std::unique_ptr<optim::Optimizer> make_plain(Kind k, nn::Module& m) {
  if (k == Kind::adam) return std::make_unique<optim::Adam>(m.parameters(), 1e-2);
  if (k == Kind::adamw)
    return std::make_unique<optim::AdamW>(optim::weight_decay_groups(m, 0.1), 1e-2);
  return std::make_unique<optim::SGD>(m.parameters(), 0.05, 0.9);
}

inline std::unique_ptr<ZeroRedundancyOptimizer> make_zero(Kind k, nn::Module& m,
                                                          std::shared_ptr<ProcessGroup> pg) {
  if (k == Kind::adam)
    return std::make_unique<ZeroRedundancyOptimizer>(m.parameters(), adam_factory(1e-2), pg);
  if (k == Kind::adamw)
    return std::make_unique<ZeroRedundancyOptimizer>(optim::weight_decay_groups(m, 0.1),
                                                     adamw_factory(1e-2), pg);
  return std::make_unique<ZeroRedundancyOptimizer>(m.parameters(), sgd_factory(0.05, 0.9), pg);
}

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor x = a.detach().to(kCPU).contiguous(), y = b.detach().to(kCPU).contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  return max(abs(sub(a.detach().to(kCPU, kFloat64), b.detach().to(kCPU, kFloat64)))).item<double>();
}

// Largest difference between two state dicts (INFINITY when keys or shapes differ).
inline double state_dict_diff(const std::map<std::string, Tensor>& a,
                              const std::map<std::string, Tensor>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (const auto& [k, t] : a) {
    auto it = b.find(k);
    if (it == b.end() || it->second.shape() != t.shape()) return INFINITY;
    if (t.numel()) worst = std::max(worst, max_abs_diff(t, it->second));
  }
  return worst;
}

inline std::shared_ptr<Mlp> clone_of(const Mlp& m) {
  return std::dynamic_pointer_cast<Mlp>(m.clone());
}

struct TempDir {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("minidl_zero_test_" + std::to_string(::getpid()));
  TempDir() { std::filesystem::create_directories(path); }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace zerotest
