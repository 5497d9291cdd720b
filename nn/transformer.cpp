// CausalSelfAttention (fused QKV projection read by the attention kernels through strided head
// views, no copies; the general path splits heads in one copy each way; KV cache, causal
// masks aligned to the bottom-right when new positions follow cached ones), MLP and the pre-norm
// TransformerBlock.
#include "nn/transformer.h"

#include <array>
#include <cmath>
#include <limits>
#include <optional>

#include "autograd/autocast.h"
#include "autograd/function.h"
#include "nn/attention_functional.h"
#include "tensor/sdpa_out.h"
#include "tensor/variants.h"

namespace minidl::nn {

namespace {

// The fused attention op with torch's signature (bool mask: true = attend; is_causal top-left
// aligned). q:[B,H,L,E] k:[B,H,S,E] v:[B,H,S,Ev] -> [B,H,L,Ev].
Tensor sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
            double dropout_p, bool is_causal, Generator* gen) {
  return functional::scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal,
                                                  std::nullopt, gen);
}

// qkv:[B,T,3C] -> q, k, v:[B,nh,T,hd], the three slices of one [3,B,nh,T,hd] buffer made by a
// single permuting copy (contiguous; the general path's heads, also the KV cache's). No history.
std::array<Tensor, 3> packed_heads(const Tensor& qkv, int64_t n_head) {
  const int64_t B = qkv.size(0), T = qkv.size(1), hd = qkv.size(2) / 3 / n_head;
  const Tensor heads = native::contiguous(
      native::permute(native::reshape(qkv, {B, T, 3, n_head, hd}), {2, 0, 3, 1, 4}));
  return {native::select(heads, 0, 0), native::select(heads, 0, 1), native::select(heads, 0, 2)};
}

// qkv:[B,T,3C] -> q, k, v:[B,nh,T,hd] by packed_heads. One
// autograd node for the three: its backward writes their gradients into one [B,T,3C] tensor,
// where three narrow views would each zero-fill a [B,T,3C] gradient and add.
std::array<Tensor, 3> split_heads(const Tensor& qkv, int64_t n_head) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, hd = C / n_head;
  std::array<Tensor, 3> out = packed_heads(qkv, n_head);  // the node below is the only history
  autograd::record(
      "SplitHeadsBackward", {qkv}, {&out[0], &out[1], &out[2]}, {},
      [B, T, C, n_head, hd](const std::vector<Tensor>& g, const auto&) {
        const bool all = g[0].defined() && g[1].defined() && g[2].defined();
        Tensor gq = all ? empty({B, T, 3 * C}, g[0].dtype(), g[0].device()) : Tensor();
        for (size_t p = 0; p < 3; ++p) {
          if (!g[p].defined()) continue;
          if (!gq.defined()) gq = zeros({B, T, 3 * C}, g[p].dtype(), g[p].device());
          gq.narrow(2, int64_t(p) * C, C).view({B, T, n_head, hd}).copy_(g[p].transpose(1, 2));
        }
        return std::vector<Tensor>{gq};
      });
  return out;
}

// qkv:[B,T,3C] -> q, k, v:[B,nh,T,hd], strided views of qkv (no copy; the fused attention
// kernels read them through their strides).
std::array<Tensor, 3> head_views(const Tensor& qkv, int64_t n_head) {
  const int64_t B = qkv.size(0), T = qkv.size(1), hd = qkv.size(2) / 3 / n_head;
  const Tensor heads =
      native::permute(native::reshape(qkv, {B, T, 3, n_head, hd}), {2, 0, 3, 1, 4});
  return {native::select(heads, 0, 0), native::select(heads, 0, 1), native::select(heads, 0, 2)};
}

// y:[B,T,C] as [B,nh,T,hd] (a view).
Tensor heads_of(const Tensor& y, int64_t n_head) {
  const int64_t B = y.size(0), T = y.size(1), hd = y.size(2) / n_head;
  return native::permute(native::reshape(y, {B, T, n_head, hd}), {0, 2, 1, 3});
}

// qkv:[B,T,3C] -> y:[B,T,C], the fused attention without a mask (is_causal or not) with no
// copies: the kernels read q, k, v as strided [B,nh,T,hd] views of qkv and write y through its
// [B,nh,T,hd] view, under one autograd node whose backward reads grad_y through the same view
// and writes dq, dk, dv into the three head views of one [B,T,3C] gradient. Undefined where
// the fused kernels do not apply (the caller takes the general path).
Tensor qkv_attention(const Tensor& qkv, int64_t n_head, double dropout_p, bool is_causal,
                     Generator* gen) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::scaled_dot_product_attention>(qkv))
    return qkv_attention(ac[0], n_head, dropout_p, is_causal, gen);
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  const auto [q, k, v] = head_views(qkv, n_head);
  const std::optional<SdpaParams> params = native::scaled_dot_product_attention_params(
      q, k, v, Tensor(), dropout_p, is_causal, std::nullopt, gen);
  if (!params) return {};  // (no random numbers drawn: the general path draws them)
  Tensor y = empty({B, T, C}, qkv.dtype(), qkv.device());
  const SdpaForwardResult r =
      native::scaled_dot_product_attention_forward_out(q, k, v, *params, heads_of(y, n_head));
  autograd::record(
      "QkvAttentionBackward", {qkv}, {&y}, {q, k, v, r.out, r.lse},
      [p = *params, B, T, C, n_head](const std::vector<Tensor>& g, const std::vector<Tensor>& sv) {
        const Tensor gqkv = empty({B, T, 3 * C}, sv[0].dtype(), sv[0].device());
        const auto [gq, gk, gv] = head_views(gqkv, n_head);
        const SdpaGrads into{gq, gk, gv};
        native::scaled_dot_product_attention_backward(heads_of(g[0], n_head), sv[0], sv[1], sv[2],
                                                      sv[3], sv[4], p, &into);
        return std::vector<Tensor>{gqkv};  // [B,T,3C]
      });
  return y;
}

// [L, S] bool, true = attend: query i (at position past + i) sees keys j <= past + i.
Tensor causal_attend_mask(int64_t L, int64_t S, int64_t past, Device device) {
  Tensor i = arange(L, kInt64, device).unsqueeze(1) + Scalar(past);  // [L,1]
  Tensor j = arange(S, kInt64, device).unsqueeze(0);                 // [1,S]
  return le(j, i);
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(int64_t n_embd_, int64_t n_head_, double p, bool bias,
                                         Generator* g)
    : n_embd(n_embd_), n_head(n_head_), head_dim(0), dropout(p), gen(g) {
  MINIDL_CHECK(n_embd > 0 && n_head > 0 && n_embd % n_head == 0, "CausalSelfAttention: n_embd (",
               n_embd, ") must be a positive multiple of n_head (", n_head, ")");
  MINIDL_CHECK(p >= 0.0 && p < 1.0, "CausalSelfAttention: dropout must be in [0, 1), got ", p);
  head_dim = n_embd / n_head;
  c_attn = std::make_shared<Linear>(n_embd, 3 * n_embd, bias, gen);
  c_proj = std::make_shared<Linear>(n_embd, n_embd, bias, gen);
  attn_dropout = std::make_shared<Dropout>(p, gen);
  resid_dropout = std::make_shared<Dropout>(p, gen);
  register_module("c_attn", &c_attn);
  register_module("c_proj", &c_proj);
  register_module("attn_dropout", &attn_dropout);
  register_module("resid_dropout", &resid_dropout);
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  return forward(x, AttentionOptions{});
}

// x:[B,T,C] -> [B,T,C]
Tensor CausalSelfAttention::forward(const Tensor& x, const AttentionOptions& opt) {
  MINIDL_CHECK(x.dim() == 3 && x.size(2) == n_embd,
               "CausalSelfAttention: expected x of shape [B, T, ", n_embd, "], got ",
               x.shape_str());
  const int64_t B = x.size(0), T = x.size(1), C = n_embd;
  Tensor qkv = (*c_attn)(x);  // [B,T,3C]
  const double p = is_training() ? attn_dropout->p : 0.0;
  // training and plain evaluation (MINIDL_UNFUSED=qkv_attention: the general path)
  if (!opt.cache && !opt.attn_mask.defined() && variants::fused("qkv_attention")) {
    Tensor y = qkv_attention(qkv, n_head, p, T > 1, gen);  // [B,T,C]
    if (y.defined()) return (*resid_dropout)((*c_proj)(y));
  }
  auto [q, k, v] = split_heads(qkv, n_head);  // [B,nh,T,hd] each
  int64_t past = 0;
  if (opt.cache) {
    KVCache& c = *opt.cache;
    past = c.size();
    if (past > 0) {
      MINIDL_CHECK(c.v.defined() && c.k.dim() == 4 && c.k.size(0) == B && c.k.size(1) == n_head &&
                       c.k.size(3) == head_dim && c.v.shape() == c.k.shape(),
                   "CausalSelfAttention: KV cache k ", c.k.shape_str(), " / v ",
                   c.v.defined() ? c.v.shape_str() : std::string("undefined"), " does not match [",
                   B, ", ", n_head, ", T_cached, ", head_dim, "]");
      k = cat({c.k, k}, 2);
      v = cat({c.v, v}, 2);
    }
    c.k = k;
    c.v = v;
  }
  const int64_t S = past + T;
  Tensor mask;
  bool is_causal = false;
  if (opt.attn_mask.defined()) {
    Tensor causal = causal_attend_mask(T, S, past, x.device());
    const Tensor& m = opt.attn_mask;
    mask = m.dtype() == kBool
               ? logical_and(m, causal)
               : where(causal, m.to(q.dtype()), Scalar(-std::numeric_limits<double>::infinity()));
  } else if (past == 0) {
    is_causal = T > 1;
  } else if (T > 1) {
    mask = causal_attend_mask(T, S, past, x.device());  // bottom-right aligned
  }                                                     // one new query: sees everything
  Tensor y = sdpa(q, k, v, mask, p, is_causal, gen);    // [B,nh,T,hd]
  y = y.transpose(1, 2).reshape({B, T, C});
  return (*resid_dropout)((*c_proj)(y));
}

MLP::MLP(int64_t n_embd, double p, bool bias, Generator* gen, std::string approx)
    : gelu_approximate(std::move(approx)) {
  MINIDL_CHECK(gelu_approximate == "tanh" || gelu_approximate == "none",
               "MLP: gelu_approximate must be \"tanh\" or \"none\", got \"", gelu_approximate,
               "\"");
  c_fc = std::make_shared<Linear>(n_embd, 4 * n_embd, bias, gen);
  c_proj = std::make_shared<Linear>(4 * n_embd, n_embd, bias, gen);
  dropout = std::make_shared<Dropout>(p, gen);
  register_module("c_fc", &c_fc);
  register_module("c_proj", &c_proj);
  register_module("dropout", &dropout);
}

// x:[*, C] -> [*, C]
Tensor MLP::forward(const Tensor& x) {
  // c_fc and a tanh GELU in one dispatch (linear_gelu) unless c_fc's call has hooks to run; and
  // c_proj with the GELU's backward in its input-gradient GEMM unless c_proj's call has hooks
  const bool tanh = gelu_approximate == "tanh";
  if (tanh && !c_fc->has_forward_hooks() && !c_proj->has_forward_hooks())
    return (*dropout)(
        linear_gelu_linear(x, c_fc->weight, c_fc->bias, c_proj->weight, c_proj->bias));
  const Tensor h = tanh && !c_fc->has_forward_hooks() ? linear_gelu(x, c_fc->weight, c_fc->bias)
                                                      : gelu((*c_fc)(x), gelu_approximate);
  return (*dropout)((*c_proj)(h));
}

TransformerBlock::TransformerBlock(int64_t n_embd, int64_t n_head, double dropout, bool bias,
                                   Generator* gen) {
  ln_1 = std::make_shared<LayerNorm>(n_embd, LayerNormOptions{.bias = bias});
  attn = std::make_shared<CausalSelfAttention>(n_embd, n_head, dropout, bias, gen);
  ln_2 = std::make_shared<LayerNorm>(n_embd, LayerNormOptions{.bias = bias});
  mlp = std::make_shared<MLP>(n_embd, dropout, bias, gen);
  register_module("ln_1", &ln_1);
  register_module("attn", &attn);
  register_module("ln_2", &ln_2);
  register_module("mlp", &mlp);
}

Tensor TransformerBlock::forward(const Tensor& x) {
  return forward(x, AttentionOptions{});
}

// x:[B,T,C] -> [B,T,C]. The first residual add and ln_2 are one add_layer_norm node, and under
// autocast both norms hand the Linears after them 16-bit rows (nn::residual_layer_norm).
Tensor TransformerBlock::forward(const Tensor& x, const AttentionOptions& opt) {
  const Tensor n1 = residual_layer_norm(x, Tensor(), *ln_1, /*autocast_out=*/true).out;
  const Parts p = forward_parts(x, n1, opt);
  return p.h + p.m;
}

// x, n1:[B,T,C] -> h, m:[B,T,C]
TransformerBlock::Parts TransformerBlock::forward_parts(const Tensor& x, const Tensor& n1,
                                                        const AttentionOptions& opt) {
  const ResidualNorm h = residual_layer_norm(x, attn->forward(n1, opt), *ln_2, true);
  return {h.sum, (*mlp)(h.out)};
}

}  // namespace minidl::nn
