// Suite cuda_training: the PyTorch golden training trajectories of test_training_golden.cpp
// (MLP and MNIST CNN, SGD(momentum) and AdamW, f32 and f64) reproduced on the GPU with TF32
// off, under the CPU test's tolerances (helpers in training_golden_util.h).
#include "tensor/cuda_api.h"
#include "training_golden_util.h"

using namespace minidl;
using namespace golden_traj;

namespace {

// Turns TF32 off for the scope (f32 matmul/conv must be true f32 to meet 1e-5) and restores it.
struct NoTF32 {
  bool previous = cuda::allow_tf32();
  NoTF32() { cuda::set_allow_tf32(false); }
  ~NoTF32() { cuda::set_allow_tf32(previous); }
};

void run_on_gpu(const std::string& model_name, const std::string& opt_name) {
  REQUIRE(cuda::device_count() > 0);
  NoTF32 no_tf32;
  REQUIRE_FALSE(cuda::allow_tf32());
  run_case(model_name, opt_name, kCUDA);
  cuda::synchronize();
}

}  // namespace

TEST_SUITE("cuda_training") {
  TEST_CASE("cuda training golden: MLP + SGD(momentum) matches PyTorch") {
    run_on_gpu("mlp", "sgd");
  }
  TEST_CASE("cuda training golden: MLP + AdamW matches PyTorch") {
    run_on_gpu("mlp", "adamw");
  }
  TEST_CASE("cuda training golden: MNIST CNN + SGD(momentum) matches PyTorch") {
    run_on_gpu("cnn", "sgd");
  }
  TEST_CASE("cuda training golden: MNIST CNN + AdamW matches PyTorch") {
    run_on_gpu("cnn", "adamw");
  }

  // The same f64 run on both devices ends with the same weights far below the golden tolerance
  // (SGD is linear in the gradients, so only summation orders differ).
  TEST_CASE("cuda training: f64 CNN + SGD on CPU and GPU agree to 1e-11") {
    REQUIRE(cuda::device_count() > 0);
    NoTF32 no_tf32;
    std::vector<std::vector<double>> finals[2];
    for (int d = 0; d < 2; ++d) {
      const Device dev = d == 0 ? kCPU : kCUDA;
      Shape in_shape;
      auto model = make_model("cnn", in_shape);
      model->to(kFloat64);
      model->load_state_dict(initial_state(G()["cnn"]["init"], kFloat64));
      model->to(dev);
      optim::SGD opt(model->parameters(), 0.05, 0.9);
      int64_t n_in = shape_numel(in_shape);
      for (int s = 0; s < 5; ++s) {
        std::vector<double> xv(static_cast<size_t>(n_in)), yv(static_cast<size_t>(in_shape[0]));
        for (int64_t i = 0; i < n_in; ++i) xv[size_t(i)] = input_value(i, s);
        for (int64_t i = 0; i < in_shape[0]; ++i) yv[size_t(i)] = double((s * 7 + i * 3) % 10);
        Tensor x = from_f64(xv, in_shape, kFloat64).to(dev);
        Tensor y = from_f64(yv, {in_shape[0]}, kInt64).to(dev);
        opt.zero_grad();
        Tensor loss = nn::functional::cross_entropy((*model)(x), y);
        loss.backward();
        opt.step();
      }
      for (const auto& [name, p] : model->named_parameters()) {
        CHECK(p.device() == dev);
        finals[d].push_back(to_f64(p));
      }
    }
    REQUIRE(finals[0].size() == finals[1].size());
    for (size_t t = 0; t < finals[0].size(); ++t) {
      CAPTURE(t);
      double diff = 0, ref = 0;
      for (size_t k = 0; k < finals[0][t].size(); ++k) {
        diff = std::max(diff, std::abs(finals[0][t][k] - finals[1][t][k]));
        ref = std::max(ref, std::abs(finals[0][t][k]));
      }
      CHECK(diff <= 1e-11 * std::max(ref, 1.0));
    }
  }
}
