// The differentiable ops (torch.* equivalents): each runs its raw op (tensor/ops.h), with the
// autocast hook where AMP applies, and records its backward node (autograd/functions/<family>.cpp).
// Ops that have no gradient are the raw ops themselves (the using-declarations below).
#pragma once

#include <array>

#include "tensor/ops.h"

namespace minidl {

// ---- unary (autograd/functions/unary.cpp). Integer inputs of exp/log/... promote to f32.
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
// A temporary argument (relu(conv2d(...)) under NoGradGuard) is reused as the output when
// nothing else shares it: one activation-sized allocation less at inference.
Tensor relu(Tensor&& x);
Tensor gelu(const Tensor& x, std::string_view approximate = "none");  // "none" | "tanh"
Tensor silu(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor square(const Tensor& x);             // x * x
Tensor cast(const Tensor& x, DType dtype);  // always a new tensor

// ---- binary with broadcasting (autograd/functions/binary.cpp)
Tensor add(const Tensor& a, const Tensor& b, Scalar alpha = 1);  // a + alpha*b
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);  // true division (ints -> f32)
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, Scalar exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// Scalar overloads: the scalar takes part in promotion like a 0-d tensor.
Tensor add(const Tensor& a, Scalar b);
Tensor sub(const Tensor& a, Scalar b);
Tensor mul(const Tensor& a, Scalar b);
Tensor div(const Tensor& a, Scalar b);
Tensor maximum(const Tensor& a, Scalar b);
Tensor minimum(const Tensor& a, Scalar b);
Tensor where(const Tensor& cond, const Tensor& a, Scalar b);
// rounding_mode: nullopt (true division), "trunc" or "floor". Rounded modes keep integer
// dtypes (integer division by zero throws ZeroDivisionError, as torch on the CPU) and have a
// zero gradient.
Tensor div(const Tensor& a, const Tensor& b, std::optional<std::string_view> rounding_mode);
Tensor div(const Tensor& a, Scalar b, std::optional<std::string_view> rounding_mode);
Tensor floor_divide(const Tensor& a, const Tensor& b);  // div(a, b, "floor")
Tensor floor_divide(const Tensor& a, Scalar b);
// In place (self is the output; the result dtype must cast to self's dtype).
Tensor& add_(Tensor& self, const Tensor& b, Scalar alpha = 1);
Tensor& sub_(Tensor& self, const Tensor& b, Scalar alpha = 1);
Tensor& mul_(Tensor& self, const Tensor& b);
Tensor& div_(Tensor& self, const Tensor& b);
Tensor& add_(Tensor& self, Scalar b);
Tensor& mul_(Tensor& self, Scalar b);
Tensor& clamp_(Tensor& self, std::optional<Scalar> min, std::optional<Scalar> max);

// ---- reductions (autograd/functions/reduce.cpp). Empty dims = all dims.
Tensor sum(const Tensor& x, const DimList& dims = {}, bool keepdim = false,
           std::optional<DType> dtype = std::nullopt);  // ints/bool sum to int64
Tensor mean(const Tensor& x, const DimList& dims = {}, bool keepdim = false);
Tensor var(const Tensor& x, const DimList& dims = {}, double correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const DimList& dims = {}, double correction = 1, bool keepdim = false);
Tensor amax(const Tensor& x, const DimList& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const DimList& dims = {}, bool keepdim = false);
Tensor max(const Tensor& x);  // 0-d
Tensor min(const Tensor& x);
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim,
                              bool keepdim = false);  // values, indices
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const DimList& dims, bool keepdim = false);
// Sums x down to `shape` (the inverse of broadcasting; autograd's un-broadcast).
Tensor sum_to_shape(const Tensor& x, const Shape& shape);

// ---- softmax (autograd/functions/softmax.cpp)
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// ---- linear algebra (autograd/functions/linalg.cpp)
Tensor matmul(const Tensor& a, const Tensor& b);  // torch.matmul semantics (1-D, batch bcast)
Tensor mm(const Tensor& a, const Tensor& b);      // [M,K] x [K,N]
Tensor bmm(const Tensor& a, const Tensor& b);     // [B,M,K] x [B,K,N]
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = {});  // x @ w.T + b
// gelu(linear(x, w, b), "tanh") with the GEMM and the activation in one dispatch (an MLP's
// c_fc; CUDA: cuBLASLt's GELU epilogue): the two calls' graph (a Linear node, a GELU node).
// The two calls themselves where it does not apply (no bias, 1-D x, MINIDL_UNFUSED=linear_gelu).
Tensor linear_gelu(const Tensor& x, const Tensor& w, const Tensor& b);
// linear(linear_gelu(x, w1, b1), w2, b2), an MLP's c_fc, GELU (tanh) and c_proj, whose backward
// takes the GELU's derivative inside c_proj's input-gradient GEMM (CUDA: cuBLASLt's DGELU
// epilogue): values, and gradients up to rounding order, as the calls'. The calls themselves
// where it does not apply (as linear_gelu, MINIDL_UNFUSED=mlp_dgelu).
Tensor linear_gelu_linear(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                          const Tensor& b2);

// ---- convolution and pooling (autograd/functions/conv.cpp); NCHW
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias = {},
              const Conv2dParams& p = {});
// torch.nn.functional.conv_transpose2d (p's stride, padding, dilation, groups):
// x:[N,Cin,H,W] or [Cin,H,W], w:[Cin,Cout/groups,kh,kw], bias:[Cout] -> [N,Cout,Ho,Wo] with
// Ho = (H-1)*stride - 2*padding + dilation*(kh-1) + output_padding + 1 (output_padding <
// stride or dilation). The adjoint of conv2d: the forward runs conv2d's input-gradient op
// (conv2d_backward_input, a kernel on both devices); one node, whose backward is
// x: conv2d(g, w), w: conv2d_backward_weight(x, g), bias: sum of g over N,H,W.
Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& bias = {},
                        const Conv2dParams& p = {},
                        const std::array<int64_t, 2>& output_padding = {0, 0});
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const Pool2dParams& p);
Tensor max_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p);

// ---- normalisation (autograd/functions/norm.cpp)
LayerNormResult layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& w = {},
                           const Tensor& b = {}, double eps = 1e-5);
// A transformer's residual add and the next pre-norm as one node: sum = x + y (promoted
// dtype), out = layer_norm(sum, ...) as out_dtype (default: sum's dtype), both differentiable.
// One fused kernel when x is f32/f64/f16/bf16 and y has x's dtype (or f16/bf16 where x is
// f32); other dtype mixes run as the composite. y may be undefined (out = layer_norm(x)).
AddLayerNormResult add_layer_norm(const Tensor& x, const Tensor& y, const Shape& normalized_shape,
                                  const Tensor& w = {}, const Tensor& b = {}, double eps = 1e-5,
                                  std::optional<DType> out_dtype = std::nullopt);
// running_mean/var may be undefined (then train-mode stats are always used).
BatchNormResult batch_norm(const Tensor& x, const Tensor& w, const Tensor& b, Tensor running_mean,
                           Tensor running_var, bool training, double momentum = 0.1,
                           double eps = 1e-5);

// ---- losses (autograd/functions/loss.cpp)
// logits:[N,C] or [N,C,d1..]; target int64 [N] or [N,d1..], or floating class probabilities
// of the logits' shape (composite, gradients to logits and target; lse left undefined)
CrossEntropyResult cross_entropy_forward(const Tensor& logits, const Tensor& target,
                                         Reduction reduction = Reduction::mean,
                                         int64_t ignore_index = -100, double label_smoothing = 0.0);
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     Reduction reduction = Reduction::mean, int64_t ignore_index = -100,
                     double label_smoothing = 0.0);

// ---- attention (autograd/functions/attention.cpp)
// torch.nn.functional.scaled_dot_product_attention (PyTorch 2.x): q:[..., L, E] k:[..., S, E]
// v:[..., S, Ev] (leading dims broadcast) -> [..., L, Ev]. attn_mask broadcasts to [..., L, S]:
// bool with true = takes part (attends), or floating (added to the scores). is_causal: query i
// attends keys j <= i (top-left aligned). scale defaults to 1/sqrt(E). dropout_p > 0 drops
// attention probabilities whenever it is given (pass 0 in eval mode). Fused (online softmax,
// no L x S buffer); saves only the output and the per-row log-sum-exp for backward. A row whose
// keys are all masked gives 0 (and zero gradients), where torch's math path gives NaN. A
// floating mask that requires grad takes the composite path (it gets a gradient there).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = {}, double dropout_p = 0.0,
                                    bool is_causal = false, std::optional<double> scale = {},
                                    Generator* gen = nullptr);
// The same from differentiable primitives (matmul, softmax, where): the reference the fused op
// is tested against (fully masked rows give NaN here, as in torch).
Tensor scaled_dot_product_attention_math(const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& attn_mask = {}, double dropout_p = 0.0,
                                         bool is_causal = false, std::optional<double> scale = {},
                                         Generator* gen = nullptr);

// ---- indexing (autograd/functions/index.cpp)
Tensor embedding(const Tensor& weight, const Tensor& indices);  // -> [*indices, D]
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor& scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                               bool sorted = true);

// ---- joining and splitting (autograd/functions/join.cpp)
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

// ---- masking (autograd/functions/mask.cpp)
// x:[..., R, C]: keeps elements with j - i <= diagonal (tril) / >= diagonal (triu), zeros the
// rest; batched over the leading dims. The gradient is masked the same way.
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
// x where !mask, value where mask (mask bool, broadcast to x's shape; result in x's dtype).
// value may be a 0-d tensor (it then gets the summed gradient of the filled positions).
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Tensor& value);
Tensor& masked_fill_(Tensor& self, const Tensor& mask, Scalar value);

// ---- scans (autograd/functions/scan.cpp)
// Running sum along dim; bool/integer inputs give int64 unless dtype is given.
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);

// ---- ops without a gradient, and the backward kernels the nodes call: the raw ops as they are
using native::add_layer_norm_backward;
using native::allclose;
using native::argmax;
using native::argmin;
using native::avg_pool2d_backward;
using native::batch_norm_backward;
using native::conv2d_backward_input;
using native::conv2d_backward_weight;
using native::cross_entropy_backward;
using native::cumsum_backward;
using native::embedding_backward;
using native::eq;
using native::equal;
using native::ge;
using native::gelu_backward;
using native::gt;
using native::layer_norm_backward;
using native::le;
using native::log_softmax_backward;
using native::logical_and;
using native::logical_not;
using native::logical_or;
using native::lt;
using native::max_pool2d_backward;
using native::ne;
using native::one_hot;
using native::scaled_dot_product_attention_backward;
using native::scaled_dot_product_attention_forward;
using native::softmax_backward;

// ---- operators
inline Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
inline Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
inline Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
inline Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
inline Tensor operator-(const Tensor& a) {
  return neg(a);
}
inline Tensor operator+(const Tensor& a, Scalar b) {
  return add(a, b);
}
inline Tensor operator-(const Tensor& a, Scalar b) {
  return sub(a, b);
}
inline Tensor operator*(const Tensor& a, Scalar b) {
  return mul(a, b);
}
inline Tensor operator/(const Tensor& a, Scalar b) {
  return div(a, b);
}
inline Tensor operator+(Scalar a, const Tensor& b) {
  return add(b, a);
}
inline Tensor operator*(Scalar a, const Tensor& b) {
  return mul(b, a);
}
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator/(Scalar a, const Tensor& b);
inline Tensor operator==(const Tensor& a, const Tensor& b) {
  return eq(a, b);
}
inline Tensor operator!=(const Tensor& a, const Tensor& b) {
  return ne(a, b);
}
inline Tensor operator<(const Tensor& a, const Tensor& b) {
  return lt(a, b);
}
inline Tensor operator<=(const Tensor& a, const Tensor& b) {
  return le(a, b);
}
inline Tensor operator>(const Tensor& a, const Tensor& b) {
  return gt(a, b);
}
inline Tensor operator>=(const Tensor& a, const Tensor& b) {
  return ge(a, b);
}
// Comparisons with a Scalar on either side (x > 0, 0.5 <= x): bool tensors, no gradient.
inline Tensor operator==(const Tensor& a, Scalar b) {
  return eq(a, b);
}
inline Tensor operator!=(const Tensor& a, Scalar b) {
  return ne(a, b);
}
inline Tensor operator<(const Tensor& a, Scalar b) {
  return lt(a, b);
}
inline Tensor operator<=(const Tensor& a, Scalar b) {
  return le(a, b);
}
inline Tensor operator>(const Tensor& a, Scalar b) {
  return gt(a, b);
}
inline Tensor operator>=(const Tensor& a, Scalar b) {
  return ge(a, b);
}
inline Tensor operator==(Scalar a, const Tensor& b) {
  return eq(b, a);
}
inline Tensor operator!=(Scalar a, const Tensor& b) {
  return ne(b, a);
}
inline Tensor operator<(Scalar a, const Tensor& b) {
  return gt(b, a);
}
inline Tensor operator<=(Scalar a, const Tensor& b) {
  return ge(b, a);
}
inline Tensor operator>(Scalar a, const Tensor& b) {
  return lt(b, a);
}
inline Tensor operator>=(Scalar a, const Tensor& b) {
  return le(b, a);
}
inline Tensor& operator+=(Tensor& a, const Tensor& b) {
  return add_(a, b);
}
inline Tensor& operator-=(Tensor& a, const Tensor& b) {
  return sub_(a, b);
}
inline Tensor& operator*=(Tensor& a, const Tensor& b) {
  return mul_(a, b);
}
inline Tensor& operator/=(Tensor& a, const Tensor& b) {
  return div_(a, b);
}
inline Tensor& operator+=(Tensor& a, Scalar b) {
  return add_(a, b);
}
inline Tensor& operator*=(Tensor& a, Scalar b) {
  return mul_(a, b);
}

}  // namespace minidl
