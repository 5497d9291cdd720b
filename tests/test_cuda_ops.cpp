// Suite cuda_ops: every op of tensor/op_list.def run through its frontend on CUDA vs CPU (random
// shapes with broadcasting, non-contiguous and zero-size inputs, every dtype the CPU kernel
// supports). This file: copy/fill/arange, unary, binary, reductions, softmax, matmul; the
// coverage test (not a cuda suite: needs no GPU) demands a case for every op.
#include <set>

#include "cuda_parity.h"
#include "tensor/cuda_api.h"

using namespace minidl;
using namespace parity;

namespace {

using V = std::vector<Tensor>;
const std::vector<std::vector<Shape>> kUnaryShapes = {
    {{}}, {{1}}, {{7}}, {{33, 65}}, {{4, 5, 6}}, {{0, 3}}, {{4099}}, {{3, 1, 257}}};
const std::vector<std::vector<Shape>> kBinaryShapes = {
    {{4, 5}, {4, 5}}, {{4, 1}, {1, 5}},       {{3, 4, 5}, {5}}, {{}, {2, 3}},        {{2, 3}, {}},
    {{0, 5}, {1, 5}}, {{6, 1, 7}, {1, 5, 1}}, {{1027}, {1027}}, {{2, 513}, {2, 513}}};

using UF = std::function<Tensor(const Tensor&)>;
using BF = std::function<Tensor(const Tensor&, const Tensor&)>;
#define U(expr) [](const Tensor& x) { return expr; }
#define B(expr) \
  []([[maybe_unused]] const Tensor& a, [[maybe_unused]] const Tensor& b) { return expr; }

// A unary op case over every dtype; each function is one variant.
Case unary(const std::string& op, std::vector<UF> fs, bool exact = false) {
  Case c{op, {op}, kUnaryShapes, kAll, [fs](const V& in, Device, int v) {
           return V{fs[size_t(v)](in[0])};
         }};
  c.variants = int(fs.size());
  c.exact = exact;
  return c;
}
Case binary(const std::string& op, std::vector<BF> fs, bool exact = false) {
  Case c{op, {op}, kBinaryShapes, kAll, [fs](const V& in, Device, int v) {
           return V{fs[size_t(v)](in[0], in[1])};
         }};
  c.variants = int(fs.size());
  c.exact = exact;
  return c;
}

}  // namespace

namespace parity {

std::vector<Case> cases_elementwise() {
  std::vector<Case> cs;
  // copy: clone, every cast, copy_ into strided destinations and from broadcast sources.
  Case copy{"copy and cast", {"copy"}, kUnaryShapes, kAll, [](const V& in, Device dev, int) {
              V out{in[0].clone(), in[0].contiguous()};
              Tensor src = in[0].is_floating_point() ? abs(in[0]) : in[0];  // no negative->u8
              for (DType dt : kAll) out.push_back(cast(src, dt));
              if (in[0].dim() >= 2 && in[0].numel() > 0) {
                Tensor dst = zeros(in[0].transpose(0, 1).shape(), kFloat64, dev).transpose(0, 1);
                dst.copy_(in[0]);  // strided destination, with a cast
                Shape ws = in[0].shape();
                ws.insert(ws.begin(), 3);
                Tensor wide = zeros(ws, in[0].dtype(), dev);
                wide.copy_(in[0].narrow(0, 0, 1));  // broadcast source [1, ...]
                out.push_back(dst);
                out.push_back(wide);
              }
              return out;
            }};
  copy.exact = true;
  cs.push_back(copy);
  Case fill{"fill", {"fill"}, kUnaryShapes, kAll, [](const V& in, Device dev, int) {
              Tensor a = full(in[0].shape(), 3, in[0].dtype(), dev);
              Tensor b = zeros({in[0].numel(), 3}, in[0].dtype(), dev);
              Tensor col = b.select(1, 1);  // stride 3
              col.fill_(1);
              Tensor c = in[0].clone();
              c.zero_();
              return V{a, b, c, ones_like(in[0])};
            }};
  fill.exact = true;
  cs.push_back(fill);
  Case ar{"arange", {"arange"}, {{{1}}}, kAll, [](const V& in, Device dev, int v) {
            DType dt = in[0].dtype();
            switch (v) {
              case 0:
                return V{arange(0, 1000, 1, dt, dev)};
              case 1:
                return V{arange(10, -11, -3, dt, dev)};
              case 2:
                return V{arange(-3.5, 7.25, 0.75, dt, dev)};
              case 3:
                return V{arange(5, 5, 1, dt, dev)};  // empty
              default:
                return V{linspace(-1, 2, 37, dt, dev), eye(5, 7, dt, dev)};
            }
          }};
  ar.variants = 5;
  ar.layouts = false;
  ar.rejects = {{{kBool}, {0, 1, 2, 3}, "arange: dtype bool is not supported"},
                {{kBool}, {4}, "linspace: dtype bool is not supported"},
                {{kInt32, kInt64, kUInt8}, {2}, "floating-point bounds with integer dtype"}};
  cs.push_back(ar);

  cs.push_back(unary("neg", {U(neg(x)), U(-x)}, true));
  cs.back().rejects = {{{kBool}, {}, "negation, the `-` operator, on a bool tensor"}};
  cs.push_back(unary("abs", {U(abs(x))}, true));
  cs.back().rejects = {{{kBool}, {}, "op `abs`: not supported for bool tensors"}};
  cs.push_back(unary("sign", {U(sign(x))}, true));
  cs.push_back(unary("exp", {U(exp(x))}));
  cs.push_back(unary("log", {U(log(x))}));  // NaN for x < 0, -inf at 0
  cs.push_back(unary("log1p", {U(log1p(x))}));
  cs.push_back(unary("sqrt", {U(sqrt(x))}));
  cs.push_back(unary("rsqrt", {U(rsqrt(x))}));
  cs.push_back(unary("sin", {U(sin(x)), U(sin(x * 30.0))}));
  cs.push_back(unary("cos", {U(cos(x)), U(cos(x * 30.0))}));
  cs.push_back(unary("tanh", {U(tanh(x)), U(tanh(x * 10.0))}));
  cs.push_back(unary("sigmoid", {U(sigmoid(x)), U(sigmoid(x * 40.0))}));
  cs.push_back(unary("relu", {U(relu(x))}, true));
  cs.back().rejects = {{{kBool}, {}, "op `relu`: not supported for bool tensors"}};
  cs.push_back(unary("gelu", {U(gelu(x)), U(gelu(x * 5.0))}));
  cs.push_back(unary("gelu_tanh", {U(gelu(x, "tanh")), U(gelu(x * 5.0, "tanh"))}));
  cs.push_back(unary("silu", {U(silu(x))}));
  cs.push_back(unary("erf", {U(erf(x))}));
  cs.push_back(unary("logical_not", {U(logical_not(x))}, true));
  cs.push_back(unary("clamp",
                     {U(clamp(x, -0.5, 1.0)), U(clamp(x, std::nullopt, 0.25)),
                      U(clamp(x, -1.0, std::nullopt)), U(clamp(x, 1, -1))},
                     true));

  cs.push_back(binary("add", {B(add(a, b)), B(add(a, b, 2)), B(a + 1), B(add(a, b, 0.5))}));
  cs.back().rejects = {{kNonFloat, {3}, "argument alpha must not be a floating point number"}};
  cs.back().ops = {"add", "add_scaled_reduced"};  // alpha != 1 on f16/bf16: the fused kernel
  cs.push_back(binary("sub", {B(sub(a, b)), B(sub(a, b, 3)), B(1.5 - a)}));
  cs.back().rejects = {{{kBool}, {0, 1}, "with two bool tensors is not supported"}};
  cs.push_back(binary("mul", {B(mul(a, b)), B(a * 3)}));
  cs.push_back(binary("div", {B(div(a, b)), B(a / 3), B(2.0 / b)}));
  cs.push_back(binary("pow", {B(pow(a, abs(b))), B(pow(abs(a), b * 0.5)), B(pow(a, 2)),
                              B(pow(a, 0.5)), B(pow(a, -1.5))}));
  cs.back().rejects = {{{kBool}, {0, 1}, "op `abs`: not supported for bool tensors"}};
  cs.push_back(binary("maximum", {B(maximum(a, b)), B(maximum(a, 0.5))}, true));
  cs.push_back(binary("minimum", {B(minimum(a, b)), B(minimum(a, 0.5))}, true));
  cs.push_back(binary("eq", {B(eq(a, b)), B(a == a), B(eq(a, 1))}, true));
  cs.push_back(binary("ne", {B(ne(a, b)), B(ne(a, 0))}, true));
  cs.push_back(binary("lt", {B(lt(a, b)), B(lt(a, 0.5))}, true));
  cs.push_back(binary("le", {B(le(a, b)), B(le(a, 0))}, true));
  cs.push_back(binary("gt", {B(gt(a, b)), B(gt(a, -1))}, true));
  cs.push_back(binary("ge", {B(ge(a, b)), B(ge(a, 1))}, true));
  cs.push_back(binary("logical_and", {B(logical_and(a, b))}, true));
  cs.push_back(binary("logical_or", {B(logical_or(a, b))}, true));
  cs.push_back(binary(
      "where",
      {B(where(gt(a, b), a, b)), B(where(ne(a, 0), b, 0.5)), B(where(lt(b, 0), a, b.to(kFloat64)))},
      true));
  // Mixed dtypes: the frontends promote, then run the same kernels.
  cs.push_back(binary("promotion", {B(add(a, b.to(kFloat64))), B(mul(a.to(kInt32), b)),
                                    B(sub(a.to(kFloat16), b.to(kBFloat16))), B(div(a, 2))}));
  cs.back().ops = {"add", "mul", "sub", "div"};
  return cs;
}

namespace {
const std::vector<std::vector<Shape>> kReduceShapes = {
    {{}}, {{7}}, {{33, 65}}, {{4, 5, 6}}, {{0, 3}}, {{2, 3000}}, {{1000, 3}}, {{3, 1, 130}}};
// The dims reduced by variant v (full, first, last, first+last, middle); nullopt: n/a.
std::optional<DimList> reduce_dims(const Tensor& x, int v) {
  const int64_t n = x.dim();
  switch (v) {
    case 0:
      return DimList{};
    case 1:
      return n >= 1 ? std::optional(DimList{0}) : std::nullopt;
    case 2:
      return n >= 1 ? std::optional(DimList{-1}) : std::nullopt;
    case 3:
      return n >= 2 ? std::optional(DimList{0, -1}) : std::nullopt;
    default:
      return n >= 3 ? std::optional(DimList{1}) : std::nullopt;
  }
}
// A reduction case: f(x, dims, keepdim) per dim set, keepdim alternating.
Case reduction(const std::string& op, std::function<V(const Tensor&, const DimList&, bool)> f,
               bool exact = false, std::vector<DType> dtypes = kAll) {
  Case c{op, {op}, kReduceShapes, dtypes, [f](const V& in, Device, int v) {
           auto dims = reduce_dims(in[0], v);
           return dims ? f(in[0], *dims, v % 2 == 1) : V{};
         }};
  c.variants = 5;
  c.exact = exact;
  return c;
}
}  // namespace

std::vector<Case> cases_reduce_linalg() {
  using D = const DimList&;
  std::vector<Case> cs;
  cs.push_back(reduction("sum", [](const Tensor& x, D d, bool k) {
    return V{sum(x, d, k), sum(x, d, k, kFloat64)};
  }));
  cs.push_back(reduction("mean", [](const Tensor& x, D d, bool k) { return V{mean(x, d, k)}; }));
  cs.back().rejects = {{kNonFloat, {}, "op `mean`: could not infer output dtype"}};
  // amax/amin/max(dim)/min(dim) have no identity: empty reductions are errors, as in PyTorch.
  cs.push_back(reduction(
      "amax", [](const Tensor& x, D d, bool k) { return V{amax(x, d, k)}; }, true));
  cs.back().rejects = {{{}, {0}, "cannot compute amax over an empty tensor"},
                       {{}, {1, 3}, "cannot compute amax over an empty dimension"}};
  cs.push_back(reduction(
      "amin",
      [](const Tensor& x, D d, bool k) {
        return x.numel() > 0 ? V{amin(x, d, k), max(x), min(x)} : V{amin(x, d, k)};
      },
      true));
  cs.back().rejects = {{{}, {0}, "cannot compute amin over an empty tensor"},
                       {{}, {1, 3}, "cannot compute amin over an empty dimension"}};
  cs.push_back(reduction(
      "logsumexp", [](const Tensor& x, D d, bool k) { return V{logsumexp(x * 10.0, d, k)}; }));
  cs.push_back(reduction("var", [](const Tensor& x, D d, bool k) {
    return V{var(x, d, 1, k), var(x, d, 0, k), minidl::std(x, d, 1, k)};
  }));
  cs.back().rejects = {{kNonFloat, {}, "std and var only support floating point dtypes"}};
  // values and int64 indices along one dim; ties (frequent in ints/f16/bf16) must pick the
  // same index as the CPU kernel.
  for (const char* op : {"max_dim", "min_dim"}) {
    bool is_max = op[1] == 'a';
    Case c{op, {op}, kReduceShapes, kAll, [is_max](const V& in, Device, int v) {
             const Tensor& x = in[0];
             if (x.dim() == 0 || v >= x.dim() * 2) return V{};
             int64_t d = v / 2;
             auto [val, ix] = is_max ? max(x, d, v % 2 == 1) : min(x, d, v % 2 == 1);
             Tensor a = is_max ? argmax(x, d) : argmin(x, d);
             if (x.numel() == 0) return V{val, ix, a};
             return V{val, ix, a, is_max ? argmax(x) : argmin(x)};
           }};
    c.variants = 6;
    c.exact = true;
    c.rejects = {{{}, {0, 1}, "over an empty dimension"}};
    cs.push_back(c);
  }

  // softmax family along each dim; backward from a random grad.
  Case sm{"softmax",
          {"softmax", "log_softmax", "softmax_backward", "log_softmax_backward"},
          {{{7}, {7}},
           {{33, 65}, {33, 65}},
           {{4, 5, 6}, {4, 5, 6}},
           {{0, 3}, {0, 3}},
           {{2, 3000}, {2, 3000}},
           {{1000, 3}, {1000, 3}}},
          kFloats,
          [](const V& in, Device, int v) {
            if (v >= in[0].dim()) return V{};
            Tensor x = in[0] * 5.0, s = softmax(x, v), l = log_softmax(x, v);
            return V{s, l, softmax_backward(in[1], s, v), log_softmax_backward(in[1], l, v)};
          }};
  sm.variants = 3;
  cs.push_back(sm);

  // matmul (bmm kernel) incl. 1-D, batch broadcasting, K = 0 and transposed operands.
  Case mm_case{
      "matmul",
      {"bmm"},
      {{{5, 7}, {7, 3}},
       {{2, 5, 7}, {2, 7, 3}},
       {{7}, {7, 3}},
       {{5, 7}, {7}},
       {{3, 4, 5, 7}, {7, 6}},
       {{2, 1, 5, 7}, {3, 7, 2}},
       {{0, 7}, {7, 3}},
       {{5, 0}, {0, 3}},
       {{64, 128}, {128, 96}},
       {{1, 300}, {300, 1}}},
      kFloats,  // CUDA bmm is cuBLASLt: floating only (as PyTorch); CPU also does ints
      [](const V& in, Device, int v) {
        const Tensor &a = in[0], &b = in[1];
        if (v == 0) return V{matmul(a, b)};
        if (v == 1 && a.dim() == 2 && b.dim() == 2)
          return V{mm(a, b), mm(a.t().contiguous().t(), b)};
        if (v == 2 && a.dim() == 3 && b.dim() == 3) return V{bmm(a, b)};
        if (v == 3 && a.dim() == 2 && b.dim() == 2 && b.size(0) > 0)  // x @ w.T + bias
          return V{linear(a, b.t(), b.select(0, 0)), linear(a, b.t())};
        if (v == 4 && a.dim() == 2 && b.dim() == 2) {  // nn.Linear's dW, db: g = b, x = a^T
          auto [gw, gb] = native::linear_weight_grad(b, a.t(), true);
          return V{gw, gb, native::linear_weight_grad(b, a.t(), false).first};
        }
        return V{};
      }};
  mm_case.variants = 5;
  mm_case.ops.push_back("linear_bias");         // variant 3: linear with a bias (oneDNN / cuBLASLt)
  mm_case.ops.push_back("linear_weight_grad");  // variant 4 (CUDA: cuBLASLt's BGRADB epilogue)
  mm_case.tol_scale = 5;                        // K up to 300: cancellation leaves small outputs
  cs.push_back(mm_case);
  return cs;
}

}  // namespace parity
#undef U
#undef B

TEST_SUITE("cuda_ops") {
  TEST_CASE("cuda parity: copy, fill, arange, unary and binary ops") {
    parity::run_all(parity::cases_elementwise());
  }
  TEST_CASE("cuda parity: reductions, softmax and matmul") {
    cuda::set_allow_tf32(false);  // true f32 matmul
    parity::run_all(parity::cases_reduce_linalg());
  }
  TEST_CASE("cuda parity: conv, pooling, normalisation and losses") {
    cuda::set_allow_tf32(false);
    parity::run_all(parity::cases_nn());
  }
  TEST_CASE("cuda parity: indexing, topk and random ops") {
    parity::run_all(parity::cases_index_random());
  }
  TEST_CASE("cuda parity: in-place ops on CUDA views") {
    Tensor a = rnd({6, 8}, kFloat32, 5, kCPU), b = rnd({8}, kFloat32, 6, kCPU);
    Tensor ga = a.cuda(), gb = b.cuda();
    Tensor va = a.t(), vga = ga.t();  // [8,6] views
    add_(va, b.unsqueeze(1), 2);
    add_(vga, gb.unsqueeze(1), 2);
    mul_(va, 0.5);
    mul_(vga, 0.5);
    clamp_(va, -1.0, 1.5);
    clamp_(vga, -1.0, 1.5);
    testutil::check_close(ga.cpu(), a, 1e-6, 1e-6);
    Tensor s = zeros({4, 8}, kFloat64), gs = s.cuda();
    Tensor ix = idx({4, 8}, 4, 7, kCPU);
    scatter_add_(s, 0, ix, a.narrow(0, 0, 4).to(kFloat64));
    scatter_add_(gs, 0, ix.cuda(), ga.narrow(0, 0, 4).to(kFloat64));
    testutil::check_close(gs.cpu(), s, 1e-12, 1e-12);
  }
}

// Not a cuda suite: the table must name every op even on machines without a GPU.
TEST_CASE("cuda parity table covers every op in op_list.def") {
  std::set<std::string> covered, known;
  for (int i = 0; i < kNumOps; ++i) known.insert(std::string(op_name(Op(i))));
  for (auto* part : {&parity::cases_elementwise, &parity::cases_reduce_linalg, &parity::cases_nn,
                     &parity::cases_index_random, &parity::cases_amp, &parity::cases_gpt})
    for (const Case& c : (*part)())
      for (const std::string& op : c.ops) {
        CAPTURE(c.name);
        CHECK_MESSAGE(known.count(op), "parity case lists unknown op `", op, "`");
        covered.insert(op);
      }
  for (int i = 0; i < kNumOps; ++i) {
    CAPTURE(op_name(Op(i)));
    CHECK(covered.count(std::string(op_name(Op(i)))) == 1);
  }
  CHECK(covered.size() == size_t(kNumOps));
}

// Not a cuda suite: every case runs CPU against CPU here, so the tables are checked (each case
// compares something, the functions run, outputs agree with themselves) without a GPU.
TEST_CASE("cuda parity tables run CPU against CPU") {
  parity::run_all(parity::cases_elementwise(), kCPU);
  parity::run_all(parity::cases_reduce_linalg(), kCPU);
  parity::run_all(parity::cases_nn(), kCPU);
  parity::run_all(parity::cases_index_random(), kCPU);
  parity::run_all(parity::cases_amp(), kCPU);
  parity::run_all(parity::cases_gpt(), kCPU);
}
