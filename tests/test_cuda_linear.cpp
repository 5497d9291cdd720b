// Suite cuda_linear: nn.Linear on CUDA with its bias fused into the cuBLASLt GEMM epilogue, and
// gemm_bias_act's bias / ReLU / GELU-tanh epilogues, against an f64 CPU reference computed from
// the same (rounded) inputs: 2-D and folded 3-D inputs, transposed and misaligned views, M = 0,
// K = 0, f32 / f16 / bf16, the transformer shape 768 -> 3072, and gradients through the fused
// forward. Skipped without a GPU.
#include <doctest/doctest.h>

#include <cmath>

#include "tensor/cuda_api.h"
#include "autograd/ops.h"
#include "test_util.h"
#ifdef MINIDL_TEST_WITH_CUDA
#include "tensor/cuda/gemm.h"
#endif

using namespace minidl;
using testutil::check_close;
using testutil::random_tensor;

namespace {

const Device kGpu{DeviceType::cuda, 0};

// Tolerances against an f64 reference for a K-term dot product rounded to `dt` at the end.
std::pair<double, double> linear_tol(DType dt) {
  if (dt == kFloat16) return {2e-3, 2e-3};
  if (dt == kBFloat16) return {1.6e-2, 1.6e-2};
  return {2e-5, 2e-5};
}

// x as a given layout: 0 = contiguous, 1 = transposed view, 2 = offset by one row (the base
// address loses its 16-byte alignment).
Tensor layout(const Shape& s, DType dt, uint64_t seed, int view) {
  if (view == 1) return random_tensor({s[1], s[0]}, dt, seed, -1, 1).t();
  if (view == 2) return random_tensor({s[0] + 1, s[1]}, dt, seed, -1, 1).narrow(0, 1, s[0]);
  return random_tensor(s, dt, seed, -1, 1);
}

struct LinearCase {
  Shape x, w;
  int view = 0;
};
const LinearCase kCases[] = {
    {{7, 33}, {17, 33}}, {{2, 5, 64}, {48, 64}}, {{7, 33}, {17, 33}, 1},   {{7, 33}, {17, 33}, 2},
    {{0, 33}, {17, 33}}, {{4, 0}, {5, 0}},       {{256, 768}, {3072, 768}}};

// linear on `dev` for every case and dtype against linear in f64 on the CPU.
void check_linear_cases(Device dev) {
  uint64_t seed = 11;
  for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
    for (const LinearCase& c : kCases) {
      INFO("x ", shape_str(c.x), " w ", shape_str(c.w), " view ", c.view, " ", dt);
      const Tensor x =
          c.x.size() == 2 ? layout(c.x, dt, seed++, c.view) : random_tensor(c.x, dt, seed++, -1, 1);
      const Tensor w = random_tensor(c.w, dt, seed++, -1, 1);
      const Tensor b = random_tensor({c.w[0]}, dt, seed++, -1, 1);
      const Tensor got = linear(x.to(dev), w.to(dev), b.to(dev));
      const Tensor want = linear(x.to(kFloat64), w.to(kFloat64), b.to(kFloat64));
      REQUIRE(got.dtype() == dt);
      REQUIRE(got.device() == dev);
      auto [rtol, atol] = linear_tol(dt);
      check_close(got.to(kCPU).to(kFloat64), want, rtol, atol);
    }
  }
}

// Gradients of sum(linear(x, w, b) * r) on `other` against the CPU.
void check_linear_grads(Device other) {
  const Tensor x = random_tensor({2, 6, 40}, kFloat32, 5, -1, 1);
  const Tensor w = random_tensor({24, 40}, kFloat32, 6, -1, 1);
  const Tensor b = random_tensor({24}, kFloat32, 7, -1, 1);
  const Tensor r = random_tensor({2, 6, 24}, kFloat32, 8, -1, 1);
  std::vector<Tensor> grads[2];
  for (int d = 0; d < 2; ++d) {
    const Device dev = d == 0 ? kCPU : other;
    // detach(): x.to(kCPU) is x itself, and its requires_grad must not leak into the CUDA pass
    Tensor xd = x.detach().to(dev).requires_grad_(), wd = w.detach().to(dev).requires_grad_();
    Tensor bd = b.detach().to(dev).requires_grad_();
    sum(mul(linear(xd, wd, bd), r.to(dev))).backward();
    for (const Tensor& l : {xd, wd, bd}) grads[d].push_back(l.grad().to(kCPU));
  }
  for (size_t i = 0; i < 3; ++i) check_close(grads[1][i], grads[0][i], 1e-5, 1e-5);
}

}  // namespace

TEST_SUITE("cuda_linear") {
  TEST_CASE("cuda linear: the bias fused into the GEMM matches an f64 CPU reference") {
    check_linear_cases(kGpu);
  }
  TEST_CASE("cuda linear: gradients through the fused forward match the CPU") {
    check_linear_grads(kGpu);
  }
}

#ifdef MINIDL_TEST_WITH_CUDA
TEST_SUITE("cuda_linear") {
  TEST_CASE("cuda gemm_bias_act: bias, ReLU and GELU-tanh epilogues, with and without bias") {
    using cuda::Epilogue;
    uint64_t seed = 40;
    for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
      for (Epilogue ep : {Epilogue::none, Epilogue::relu, Epilogue::gelu_tanh}) {
        for (bool with_bias : {true, false}) {
          INFO(dt, " epilogue ", int(ep), " bias ", with_bias);
          const Tensor x = random_tensor({37, 72}, dt, seed++, -1, 1);
          const Tensor w = random_tensor({40, 72}, dt, seed++, -1, 1);
          const Tensor b = with_bias ? random_tensor({40}, dt, seed++, -1, 1) : Tensor();
          Tensor out = empty({37, 40}, dt, kGpu);
          cuda::gemm_bias_act(x.to(kGpu), w.to(kGpu), with_bias ? b.to(kGpu) : Tensor(), out, ep);
          Tensor want = matmul(x.to(kFloat64), w.to(kFloat64).t());
          if (with_bias) want = add(want, b.to(kFloat64));
          if (ep == Epilogue::relu) want = relu(want);
          if (ep == Epilogue::gelu_tanh) want = gelu(want, "tanh");
          auto [rtol, atol] = dt == kFloat64 ? std::pair{1e-12, 1e-12} : linear_tol(dt);
          if (ep == Epilogue::gelu_tanh && dt == kFloat32)  // the epilogue may use a fast tanh
            rtol = atol = 1e-3;
          check_close(out.to(kCPU).to(kFloat64), want, rtol, atol);
        }
      }
    }
  }

  TEST_CASE("cuda gemm_bias_act: shape, dtype and device errors name the tensors") {
    const Tensor x = empty({4, 8}, kFloat32, kGpu), w = empty({5, 8}, kFloat32, kGpu);
    Tensor out = empty({4, 5}, kFloat32, kGpu), bad = empty({4, 6}, kFloat32, kGpu);
    CHECK_THROWS_WITH_AS(cuda::gemm_bias_act(x, w, Tensor(), bad, cuda::Epilogue::none),
                         doctest::Contains("out [4, 6]"), Error);
    CHECK_THROWS_WITH_AS(
        cuda::gemm_bias_act(x, w, empty({5}, kFloat16, kGpu), out, cuda::Epilogue::none),
        doctest::Contains("float16"), Error);
    CHECK_THROWS_AS(
        cuda::gemm_bias_act(x.to(kCPU), w.to(kCPU), Tensor(), out, cuda::Epilogue::none), Error);
  }
}
#endif

// Not a cuda suite: the same cases on the CPU, so the cases and tolerances are checked to run
// on machines without a GPU.
TEST_CASE("cuda linear cases pass on the CPU against the f64 reference") {
  check_linear_cases(kCPU);
  check_linear_grads(kCPU);
}
