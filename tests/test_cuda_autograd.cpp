// Suite cuda_autograd: gradients by parity. Every differentiable function runs forward and
// backward on CPU and CUDA from the same f64 leaves and the same upstream gradient; outputs
// and every leaf's .grad must agree (f64: 1e-10 relative to the tensor's scale).
#include <functional>

#include "apps/mnist/model.h"
#include "cuda_parity.h"

using namespace minidl;
using parity::idx;
using parity::rnd;

namespace {

using V = std::vector<Tensor>;
using F = std::function<Tensor(const V&)>;

struct Input {
  Shape shape;
  double lo = -1, hi = 1;
};

// The device compared with the CPU (CUDA; the CPU itself in the table self-check).
Device g_dev = kCUDA;

// f(leaves) on both devices; backward of a fixed random upstream gradient; compare.
// tol_scale multiplies parity::rel_tol (f64 1e-12, f32 1e-5).
void grad_parity(const std::string& name, const F& f, const std::vector<Input>& ins,
                 DType dt = kFloat64, double tol_scale = 100) {
  CAPTURE(name);
  CAPTURE(dt);
  V outs[2];
  std::vector<V> grads(2);
  for (int d = 0; d < 2; ++d) {
    const Device dev = d == 0 ? kCPU : g_dev;
    V leaves;
    for (size_t i = 0; i < ins.size(); ++i) {
      Tensor x = testutil::random_tensor(ins[i].shape, dt, 300 + i, ins[i].lo, ins[i].hi);
      leaves.push_back(x.to(dev).requires_grad_());
    }
    Tensor y = f(leaves);
    REQUIRE(y.requires_grad());
    CHECK(y.device() == dev);
    y.backward(rnd(y.shape(), y.dtype(), 77, dev));
    outs[d] = {y.detach()};
    for (const Tensor& l : leaves) grads[size_t(d)].push_back(l.grad());
  }
  outs[1].insert(outs[1].end(), grads[1].begin(), grads[1].end());
  outs[0].insert(outs[0].end(), grads[0].begin(), grads[0].end());
  parity::compare(outs[1], outs[0], false, tol_scale, g_dev);
}

// The device the leaves live on (for index tensors made inside f).
Device dev_of(const V& in) {
  return in[0].device();
}

void check_unary_functions() {
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> fs = {
      {"neg", [](const Tensor& x) { return -x; }},
      {"abs", [](const Tensor& x) { return abs(x); }},
      {"sign", [](const Tensor& x) { return sign(x) * x; }},
      {"exp", [](const Tensor& x) { return exp(x); }},
      {"log", [](const Tensor& x) { return log(abs(x) + 0.1); }},
      {"log1p", [](const Tensor& x) { return log1p(abs(x)); }},
      {"sqrt", [](const Tensor& x) { return sqrt(abs(x) + 0.1); }},
      {"rsqrt", [](const Tensor& x) { return rsqrt(abs(x) + 0.1); }},
      {"sin", [](const Tensor& x) { return sin(x); }},
      {"cos", [](const Tensor& x) { return cos(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"relu", [](const Tensor& x) { return relu(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }},
      {"silu", [](const Tensor& x) { return silu(x); }},
      {"erf", [](const Tensor& x) { return erf(x); }},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.3, 0.5); }},
      {"square", [](const Tensor& x) { return square(x); }},
      {"pow scalar", [](const Tensor& x) { return pow(abs(x) + 0.1, 2.5); }},
      {"cast", [](const Tensor& x) { return x.to(kFloat32).to(kFloat64) * x; }},
  };
  for (const auto& [name, f] : fs) {
    grad_parity(name, [&f](const V& in) { return f(in[0]); }, {{{5, 7}}, {{}}});
    grad_parity(name, [&f](const V& in) { return f(in[0].t()); }, {{{7, 5}}});
  }
}

void check_binary_functions_with_broadcasting() {
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&, const Tensor&)>>>
      fs = {{"add", [](const Tensor& a, const Tensor& b) { return add(a, b, 2.5); }},
            {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }},
            {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }},
            {"div", [](const Tensor& a, const Tensor& b) { return a / (abs(b) + 0.5); }},
            {"pow", [](const Tensor& a, const Tensor& b) { return pow(abs(a) + 0.2, b); }},
            {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
            {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
            {"where", [](const Tensor& a, const Tensor& b) { return where(gt(a, b), a, b * 2); }}};
  for (const auto& [name, f] : fs) {
    grad_parity(name, [&f](const V& in) { return f(in[0], in[1]); }, {{{3, 4}}, {{4}}});
    grad_parity(name, [&f](const V& in) { return f(in[0], in[1]); }, {{{2, 1, 5}}, {{3, 1}}});
  }
}

void check_reductions_softmax_log_softmax() {
  const std::vector<std::pair<const char*, F>> fs = {
      {"sum", [](const V& in) { return sum(in[0], {1}); }},
      {"sum all", [](const V& in) { return sum(in[0]); }},
      {"mean",
       [](const V& in) {
         return mean(in[0], {0, 2}, true);
       }},
      {"amax", [](const V& in) { return amax(in[0], {-1}); }},
      {"amin", [](const V& in) { return amin(in[0], {0}); }},
      {"max dim", [](const V& in) { return max(in[0], 1).first; }},
      {"min dim", [](const V& in) { return min(in[0], 2, true).first; }},
      {"var", [](const V& in) { return var(in[0], {1}); }},
      {"std",
       [](const V& in) {
         return minidl::std(in[0], {0, 2}, 0);
       }},
      {"logsumexp", [](const V& in) { return logsumexp(in[0] * 3.0, {-1}); }},
      {"softmax", [](const V& in) { return softmax(in[0], 1); }},
      {"log_softmax", [](const V& in) { return log_softmax(in[0], -1); }},
  };
  for (const auto& [name, f] : fs) grad_parity(name, f, {{{3, 4, 129}}});
}

void check_matmul_linear_conv2d_pooling() {
  grad_parity("matmul", [](const V& in) { return matmul(in[0], in[1]); }, {{{2, 5, 7}}, {{7, 3}}});
  grad_parity("bmm", [](const V& in) { return bmm(in[0], in[1].transpose(1, 2)); },
              {{{2, 5, 7}}, {{2, 3, 7}}});
  grad_parity("linear", [](const V& in) { return linear(in[0], in[1], in[2]); },
              {{{4, 6, 9}}, {{5, 9}}, {{5}}});
  for (DType dt : {kFloat64, kFloat32}) {  // f64 through cuDNN too, f32 at its tolerance
    const double scale = dt == kFloat64 ? 100 : 5;
    Conv2dParams p;
    p.stride[0] = 2;
    p.padding[0] = p.padding[1] = 1;
    grad_parity(
        "conv2d", [p](const V& in) { return conv2d(in[0], in[1], in[2], p); },
        {{{2, 3, 9, 8}}, {{4, 3, 3, 3}}, {{4}}}, dt, scale);
    Conv2dParams pg;
    pg.groups = 2;
    pg.dilation[0] = pg.dilation[1] = 2;
    grad_parity(
        "conv2d groups", [pg](const V& in) { return conv2d(in[0], in[1], {}, pg); },
        {{{2, 4, 9, 9}}, {{6, 2, 3, 3}}}, dt, scale);
  }
  grad_parity("max_pool2d", [](const V& in) { return max_pool2d(in[0], pool2d_params(3, 2, 1)); },
              {{{2, 3, 9, 9}}});
  grad_parity("avg_pool2d", [](const V& in) { return avg_pool2d(in[0], pool2d_params(2)); },
              {{{2, 3, 8, 7}}});
}

void check_layer_norm_batch_norm_cross_entropy() {
  grad_parity("layer_norm", [](const V& in) { return layer_norm(in[0], {10}, in[1], in[2]).out; },
              {{{4, 7, 10}}, {{10}}, {{10}}});
  grad_parity("batch_norm",
              [](const V& in) {
                Tensor rm = zeros({3}, kFloat64, dev_of(in)), rv = ones({3}, kFloat64, dev_of(in));
                return batch_norm(in[0], in[1], in[2], rm, rv, true).out;
              },
              {{{4, 3, 5, 5}}, {{3}}, {{3}}});
  grad_parity("cross_entropy",
              [](const V& in) {
                return cross_entropy(in[0], idx({6}, 10, 5, dev_of(in)), Reduction::mean, 3, 0.1);
              },
              {{{6, 10}}});
  grad_parity("cross_entropy none",
              [](const V& in) {
                return cross_entropy(in[0], idx({2, 4, 4}, 5, 6, dev_of(in)), Reduction::none);
              },
              {{{2, 5, 4, 4}}});
}

void check_embedding_index_select_gather_scatter_add() {
  grad_parity("embedding",
              [](const V& in) {
                return embedding(in[0], idx({4, 9}, 6, 7, dev_of(in)));
              },
              {{{6, 5}}});
  grad_parity("index_select",
              [](const V& in) { return index_select(in[0], 1, idx({8}, 5, 8, dev_of(in))); },
              {{{3, 5, 2}}});
  grad_parity("gather",
              [](const V& in) {
                return gather(in[0], 0, idx({7, 4}, 3, 9, dev_of(in)));
              },
              {{{3, 4}}});
  grad_parity("scatter_add",
              [](const V& in) {
                return scatter_add(in[0], 1, idx({3, 6}, 4, 10, dev_of(in)), in[1]);
              },
              {{{3, 4}}, {{3, 6}}});
}

void check_cat_stack_split_views_dropout() {
  grad_parity("cat", [](const V& in) { return cat({in[0], in[1].t()}, 1); }, {{{3, 4}}, {{2, 3}}});
  grad_parity("stack",
              [](const V& in) {
                return stack({in[0], in[1] * 2.0}, 1);
              },
              {{{3, 4}}, {{3, 4}}});
  grad_parity("split",
              [](const V& in) {
                auto parts = split(in[0], std::vector<int64_t>{1, 3, 2}, 1);
                return parts[0] * 2.0 + sum(parts[2], {1}, true) - sum(chunk(in[0], 2, 0)[1]);
              },
              {{{4, 6}}});
  grad_parity(
      "views",
      [](const V& in) {
        return in[0].permute({2, 0, 1}).reshape({4, 6}).slice(0, 1, 4).expand({2, 3, 6}) * 1.5;
      },
      {{{2, 3, 4}}});
  grad_parity("dropout",
              [](const V& in) {
                Generator g(21);
                return nn::functional::dropout(in[0], 0.3, true, &g);
              },
              {{{17, 33}}});
}

void check_the_mnist_net_in_f64_with_dropout() {
  {
    manual_seed(11);
    auto cpu_net = std::make_shared<mnist::Net>();
    cpu_net->to(kFloat64);
    auto gpu_net = std::static_pointer_cast<mnist::Net>(cpu_net->clone());
    gpu_net->to(g_dev);
    Tensor x = rnd({4, 1, 28, 28}, kFloat64, 12, kCPU, 0, 1);
    Tensor y = idx({4}, 10, 13, kCPU);
    manual_seed(99);
    Tensor l_cpu = nn::functional::cross_entropy(cpu_net->forward(x), y);
    manual_seed(99);
    Tensor l_gpu = nn::functional::cross_entropy(gpu_net->forward(x.to(g_dev)), y.to(g_dev));
    l_cpu.backward();
    l_gpu.backward();
    testutil::check_close(l_gpu, l_cpu, 1e-10, 1e-12);
    auto pc = cpu_net->named_parameters(), pg = gpu_net->named_parameters();
    REQUIRE(pc.size() == pg.size());
    for (size_t i = 0; i < pc.size(); ++i) {
      CAPTURE(pc[i].first);
      REQUIRE(pg[i].second.grad().defined());
      parity::compare({pg[i].second.grad()}, {pc[i].second.grad()}, false, 100, g_dev);
    }
  }
}

}  // namespace

TEST_SUITE("cuda_autograd") {
  TEST_CASE("cuda autograd parity: unary functions") {
    check_unary_functions();
  }
  TEST_CASE("cuda autograd parity: binary functions with broadcasting") {
    check_binary_functions_with_broadcasting();
  }
  TEST_CASE("cuda autograd parity: reductions, softmax, log_softmax") {
    check_reductions_softmax_log_softmax();
  }
  TEST_CASE("cuda autograd parity: matmul, linear, conv2d, pooling") {
    check_matmul_linear_conv2d_pooling();
  }
  TEST_CASE("cuda autograd parity: layer_norm, batch_norm, cross_entropy") {
    check_layer_norm_batch_norm_cross_entropy();
  }
  TEST_CASE("cuda autograd parity: embedding, index_select, gather, scatter_add") {
    check_embedding_index_select_gather_scatter_add();
  }
  TEST_CASE("cuda autograd parity: cat, stack, split, views, dropout") {
    check_cat_stack_split_views_dropout();
  }
  TEST_CASE("cuda autograd parity: the MNIST Net in f64 with dropout") {
    check_the_mnist_net_in_f64_with_dropout();
  }
}

// Not a cuda suite: the same functions CPU against CPU, so every case is checked to run (and
// to produce gradients) on machines without a GPU.
TEST_CASE("cuda autograd parity functions run CPU against CPU") {
  g_dev = kCPU;
  check_unary_functions();
  check_binary_functions_with_broadcasting();
  check_reductions_softmax_log_softmax();
  check_matmul_linear_conv2d_pooling();
  check_layer_norm_batch_norm_cross_entropy();
  check_embedding_index_select_gather_scatter_add();
  check_cat_stack_split_views_dropout();
  check_the_mnist_net_in_f64_with_dropout();
  g_dev = kCUDA;
}
