// The raw layer of the ops, namespace minidl::native (PyTorch's at::native): validation, type
// promotion, output allocation and dispatch to kernel[op][device]; nothing here records autograd
// history. The differentiable ops users call (minidl::add, ...) are autograd/ops.h. Factories,
// random and promotion are shared by both layers.
#pragma once
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "tensor/dispatch.h"
#include "tensor/op_results.h"
#include "tensor/random.h"
#include "tensor/tensor.h"
#include "tensor/threads.h"

namespace minidl {

// ---- device checks shared by the frontends (tensor/ops/binary.cpp): throw
// "op `add`: expected all tensors on one device, got cpu and cuda:0"; undefined tensors are
// skipped.
void check_same_device(std::string_view op, Device a, Device b);
inline void check_same_device(std::string_view op, const Tensor& a, const Tensor& b) {
  if (a.defined() && b.defined()) check_same_device(op, a.device(), b.device());
}

// ---- factories (tensor/ops/factory.cpp)
Tensor zeros(const Shape& shape, DType dtype = kFloat32, Device device = kCPU);
Tensor ones(const Shape& shape, DType dtype = kFloat32, Device device = kCPU);
Tensor full(const Shape& shape, Scalar value, DType dtype = kFloat32, Device device = kCPU);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, Scalar value);
Tensor empty_like(const Tensor& t);
Tensor arange(Scalar end, DType dtype = kInt64, Device device = kCPU);
Tensor arange(Scalar start, Scalar end, Scalar step = 1, DType dtype = kInt64,
              Device device = kCPU);
Tensor linspace(double start, double end, int64_t steps, DType dtype = kFloat32,
                Device device = kCPU);
Tensor eye(int64_t n, std::optional<int64_t> m = std::nullopt, DType dtype = kFloat32,
           Device device = kCPU);
// Wraps external memory without copying (the caller keeps it alive, or passes a deleter).
Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device = kCPU,
                 std::function<void(void*)> deleter = {});
// Copies a vector into a new CPU tensor; shape defaults to [v.size()].
template <typename T>
Tensor tensor(const std::vector<T>& values, std::optional<Shape> shape = std::nullopt);
Tensor tensor(std::initializer_list<double> values, DType dtype = kFloat32);
Tensor scalar_tensor(Scalar value, DType dtype, Device device = kCPU);  // 0-d

// ---- random (tensor/ops/random.cpp); gen = nullptr uses default_generator()
Tensor rand(const Shape& shape, DType dtype = kFloat32, Device device = kCPU,
            Generator* gen = nullptr);
Tensor randn(const Shape& shape, DType dtype = kFloat32, Device device = kCPU,
             Generator* gen = nullptr);
Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype = kInt64,
               Device device = kCPU, Generator* gen = nullptr);
Tensor bernoulli(const Shape& shape, double p, DType dtype = kFloat32, Device device = kCPU,
                 Generator* gen = nullptr);
Tensor& uniform_(Tensor& t, double low = 0, double high = 1, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean = 0, double std = 1, Generator* gen = nullptr);
Tensor randperm(int64_t n, Generator* gen = nullptr);  // CPU int64
// Indices drawn from rows of non-negative weights (need not sum to 1): probs [C] -> [S] or
// [B,C] -> [B,S], int64. Same draws on CPU and CUDA for one generator state (tensor/random.h).
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false,
                   Generator* gen = nullptr);
// Dropout mask scaled by 1/(1-p): x * mask. p in [0,1).
Tensor dropout_mask(const Shape& shape, double p, DType dtype, Device device,
                    Generator* gen = nullptr);

// ---- type promotion helpers (tensor/ops/promote.cpp)
DType result_type(const Tensor& a, const Tensor& b);  // PyTorch rules incl. 0-d tensors
DType result_type(const Tensor& a, Scalar b);
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op = "broadcast");

// ---- shapes (tensor/ops/view.cpp)
// The shape flatten(start_dim, end_dim) gives (0-d: [1]); throws naming flatten on bad dims.
Shape flatten_shape(const Shape& shape, int64_t start_dim, int64_t end_dim);

// ---- the raw ops: the same names, signatures and results as the differentiable ops of
// autograd/ops.h, without history (implemented in tensor/ops_<family>.cpp).
namespace native {

// ---- unary (tensor/ops/unary.cpp). Integer inputs of exp/log/... promote to f32.
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
// gelu's derivative in one kernel: (grad, x) -> dx, grad cast to x's dtype and broadcast.
Tensor gelu_backward(const Tensor& grad, const Tensor& x, std::string_view approximate);
Tensor silu(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor logical_not(const Tensor& x);
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor square(const Tensor& x);             // x * x
Tensor cast(const Tensor& x, DType dtype);  // always a new tensor

// ---- binary with broadcasting (tensor/ops/binary.cpp)
Tensor add(const Tensor& a, const Tensor& b, Scalar alpha = 1);  // a + alpha*b
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);  // true division (ints -> f32)
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, Scalar exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// Scalar overloads: the scalar takes part in promotion like a 0-d tensor.
Tensor add(const Tensor& a, Scalar b);
Tensor sub(const Tensor& a, Scalar b);
Tensor mul(const Tensor& a, Scalar b);
Tensor div(const Tensor& a, Scalar b);
Tensor maximum(const Tensor& a, Scalar b);
Tensor minimum(const Tensor& a, Scalar b);
Tensor eq(const Tensor& a, Scalar b);
Tensor ne(const Tensor& a, Scalar b);
Tensor lt(const Tensor& a, Scalar b);
Tensor le(const Tensor& a, Scalar b);
Tensor gt(const Tensor& a, Scalar b);
Tensor ge(const Tensor& a, Scalar b);
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
// Exact comparisons for tests
bool equal(const Tensor& a, const Tensor& b);  // same shape and values
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

// ---- reductions (tensor/ops/reduce.cpp). Empty dims = all dims.
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
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const DimList& dims, bool keepdim = false);
// Sums x down to `shape` (the inverse of broadcasting; autograd's un-broadcast).
Tensor sum_to_shape(const Tensor& x, const Shape& shape);

// ---- softmax (tensor/ops/softmax.cpp)
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor softmax_backward(const Tensor& grad_out, const Tensor& out, int64_t dim);
Tensor log_softmax_backward(const Tensor& grad_out, const Tensor& out, int64_t dim);

// ---- linear algebra (tensor/ops/linalg.cpp)
Tensor matmul(const Tensor& a, const Tensor& b);  // torch.matmul semantics (1-D, batch bcast)
Tensor mm(const Tensor& a, const Tensor& b);      // [M,K] x [K,N]
Tensor bmm(const Tensor& a, const Tensor& b);     // [B,M,K] x [B,K,N]
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = {});  // x @ w.T + b
// {gelu(pre, "tanh"), pre} with pre = x @ w.T + b, one dispatch. x:[*,K] (at least 2-D),
// w:[N,K], b:[N], one floating dtype and device.
std::pair<Tensor, Tensor> linear_gelu(const Tensor& x, const Tensor& w, const Tensor& b);
// gelu_backward(g @ w, pre, "tanh") in one dispatch: the gradient of pre where
// out = gelu(pre, "tanh") @ w.T + b (an MLP's c_proj after linear_gelu). g:[*,N] w:[N,K]
// pre:[*,K], one floating dtype and device -> [*,K].
Tensor matmul_gelu_backward(const Tensor& g, const Tensor& w, const Tensor& pre);
// nn.Linear's parameter gradients for g:[*,N] and x:[*,K] (the batch dims folded into one GEMM):
// {grad_w [N,K], grad_b [N] (undefined unless with_bias)} in g's dtype, one dispatch.
std::pair<Tensor, Tensor> linear_weight_grad(const Tensor& g, const Tensor& x, bool with_bias);

// ---- convolution and pooling (tensor/ops/conv.cpp); NCHW
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias = {},
              const Conv2dParams& p = {});
Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& w, const Shape& x_shape,
                             const Conv2dParams& p);
Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& w_shape,
                              const Conv2dParams& p);
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const Pool2dParams& p);
Tensor max_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Shape& x_shape,
                           const Pool2dParams& p);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& x_shape, const Pool2dParams& p);

// ---- normalisation (tensor/ops/norm.cpp)
LayerNormResult layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& w = {},
                           const Tensor& b = {}, double eps = 1e-5);
LayerNormGrads layer_norm_backward(const Tensor& grad_out, const Tensor& x,
                                   const Shape& normalized_shape, const Tensor& mean,
                                   const Tensor& rstd, const Tensor& w, bool need_grad_w_b);
// sum = x + y, out = layer_norm(sum) as out_dtype, in one pass (y may be undefined). x and
// y have one shape; y's dtype and out_dtype are x's, or f16/bf16 where x is f32.
AddLayerNormResult add_layer_norm(const Tensor& x, const Tensor& y, const Shape& normalized_shape,
                                  const Tensor& w, const Tensor& b, double eps, DType out_dtype);
// g = grad_sum + d(out)/d(sum)^T grad_out (either may be undefined, not both); grad_x = g,
// grad_y = g as y_dtype (std::nullopt: none).
AddLayerNormGrads add_layer_norm_backward(const Tensor& grad_out, const Tensor& grad_sum,
                                          const Tensor& s, const Shape& normalized_shape,
                                          const Tensor& mean, const Tensor& rstd, const Tensor& w,
                                          std::optional<DType> y_dtype, bool need_grad_w_b);
// running_mean/var may be undefined (then train-mode stats are always used).
BatchNormResult batch_norm(const Tensor& x, const Tensor& w, const Tensor& b, Tensor running_mean,
                           Tensor running_var, bool training, double momentum = 0.1,
                           double eps = 1e-5);
BatchNormGrads batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& w,
                                   const Tensor& running_mean, const Tensor& running_var,
                                   const Tensor& save_mean, const Tensor& save_invstd,
                                   bool training, double eps = 1e-5);

// ---- losses (tensor/ops/loss.cpp)
// logits:[N,C] or [N,C,d1..]; target int64 [N] or [N,d1..], or floating class probabilities
// of the logits' shape (composite, gradients to logits and target; lse left undefined)
CrossEntropyResult cross_entropy_forward(const Tensor& logits, const Tensor& target,
                                         Reduction reduction = Reduction::mean,
                                         int64_t ignore_index = -100, double label_smoothing = 0.0);
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     Reduction reduction = Reduction::mean, int64_t ignore_index = -100,
                     double label_smoothing = 0.0);
// grad_loss has the shape of the forward's loss (0-d for mean/sum).
Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& target,
                              const Tensor& lse, Reduction reduction, int64_t ignore_index = -100,
                              double label_smoothing = 0.0);

// ---- fused classifier loss (tensor/ops/fused_cross_entropy.cpp; llm.c's fused classifier)
// logits:[N,Vp] or [B,T,Vp] contiguous f16/bf16/f32/f64, target int64 with N (B*T) elements.
// Returns the 0-d mean loss (f32; f64 for f64 logits) over the first num_classes (V) columns
// and the rows whose target != ignore_index (NaN when every row is ignored, as torch's mean).
// fused_cross_entropy leaves logits untouched; fused_cross_entropy_ also overwrites them with
// the loss's gradient: (softmax(row[:V]) - onehot(target)) / n_valid, 0 in the columns V..Vp
// and in ignored rows (n_valid counted on the device: no host sync).
Tensor fused_cross_entropy(const Tensor& logits, const Tensor& target, int64_t num_classes,
                           int64_t ignore_index = -100);
Tensor fused_cross_entropy_(Tensor& logits, const Tensor& target, int64_t num_classes,
                            int64_t ignore_index = -100);
// grad (the buffer fused_cross_entropy_ wrote) *= grad_loss (0-d, read on the device).
Tensor& fused_cross_entropy_backward_(Tensor& grad, const Tensor& grad_loss);

// ---- attention (tensor/ops/attention.cpp)
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
// The fused kernels without autograd (q, k, v already broadcast to one batch shape).
SdpaForwardResult scaled_dot_product_attention_forward(const Tensor& q, const Tensor& k,
                                                       const Tensor& v, const SdpaParams& p);
// into: gradient buffers to write (of q, k, v's shapes and dtype, contiguous or [B,H,n,d] head
// views with unit last stride, e.g. of one [B,T,3C] gradient), returned as they are; nullptr:
// new tensors.
SdpaGrads scaled_dot_product_attention_backward(const Tensor& grad_out, const Tensor& q,
                                                const Tensor& k, const Tensor& v, const Tensor& out,
                                                const Tensor& lse, const SdpaParams& p,
                                                const SdpaGrads* into = nullptr);
// The fused op's input checks (its error messages; also run by the composite path), and its
// kernel parameters: scale, causal, mask, and the dropout stream reserved from gen when
// dropout_p > 0 (after the checks); nullopt where the fused kernels do not apply (CUDA, head
// dims > 128: the composite path instead).
void check_scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& attn_mask, double dropout_p);
std::optional<SdpaParams> scaled_dot_product_attention_params(
    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask, double dropout_p,
    bool is_causal, std::optional<double> scale, Generator* gen);

// ---- indexing (tensor/ops/index.cpp)
Tensor embedding(const Tensor& weight, const Tensor& indices);  // -> [*indices, D]
Tensor embedding_backward(const Tensor& grad_out, const Tensor& indices, int64_t num_weights,
                          int64_t padding_idx = -1);
// grad_weight += embedding_backward(grad_out, indices, grad_weight.size(0), padding_idx), in
// place, touching only the indexed rows (each: the row plus its sum rounded to the dtype, as
// the out-of-place sum rounds it): a tied weight's gradient without a dense [V, D] temporary.
Tensor& embedding_backward_add_(Tensor& grad_weight, const Tensor& grad_out, const Tensor& indices,
                                int64_t padding_idx = -1);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor& scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);  // int64
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                               bool sorted = true);

// ---- joining and splitting (tensor/ops/join.cpp)
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

// ---- masking (tensor/ops/mask.cpp)
// x:[..., R, C]: keeps elements with j - i <= diagonal (tril) / >= diagonal (triu), zeros the
// rest; batched over the leading dims. The gradient is masked the same way.
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
// x where !mask, value where mask (mask bool, broadcast to x's shape; result in x's dtype).
// value may be a 0-d tensor (it then gets the summed gradient of the filled positions).
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Tensor& value);
Tensor& masked_fill_(Tensor& self, const Tensor& mask, Scalar value);

// ---- scans (tensor/ops/scan.cpp)
// Running sum along dim; bool/integer inputs give int64 unless dtype is given.
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);
// cumsum's gradient: the reverse running sum of grad_out along dim (0-d: grad_out itself).
Tensor cumsum_backward(const Tensor& grad_out, int64_t dim);

// ---- the Tensor methods' raw forms (tensor/ops/view.cpp, tensor/ops/copy.cpp): what the methods
// of the same name compute, without history. Code under tensor/ calls these, never the methods.
Tensor view(const Tensor& x, const Shape& shape);
Tensor reshape(const Tensor& x, const Shape& shape);
// reshape's view case: x viewed with `shape` when its strides allow one, else undefined (the
// caller copies; the shape is validated either way).
Tensor reshape_view(const Tensor& x, const Shape& shape);
Tensor permute(const Tensor& x, const DimList& dims);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor t(const Tensor& x);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor squeeze(const Tensor& x);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor unflatten(const Tensor& x, int64_t dim, const Shape& sizes);
Tensor as_strided(const Tensor& x, const Shape& shape, const Strides& strides, int64_t offset);
Tensor contiguous(const Tensor& x);
Tensor clone(const Tensor& x);
Tensor to(const Tensor& x, DType dtype);
Tensor to(const Tensor& x, Device device);
Tensor to(const Tensor& x, Device device, DType dtype);
// self is a handle: writing through a const one is fine (temporaries such as views too).
const Tensor& copy_(const Tensor& self, const Tensor& src);
// torch._foreach_copy_: dst[i].copy_(src[i]) for every i in one dispatch; contiguous floating
// tensors on one device, dst[i] and src[i] of one shape (dtypes may differ).
void foreach_copy_(const std::vector<Tensor>& dst, const std::vector<Tensor>& src);
const Tensor& fill_(const Tensor& self, Scalar value);

}  // namespace native

}  // namespace minidl
