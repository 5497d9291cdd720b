// One GPU call times every variant (issue 40): each fused path added for speed keeps its
// predecessor behind MINIDL_UNFUSED, a comma list of feature names (or `all`), read once.
//   linear_wgrad   nn.Linear's backward: dW and db as one linear_weight_grad op (else mm + sum)
//   qkv_attention  the transformer's attention read from the fused QKV (else split_heads + sdpa)
//   foreach_clip   clip_grad_norm_ as two list ops (else a norm per gradient)
//   autocast_linear  under autocast, nn.Linear's f32 weight and bias take their gradients in f32
//                  from the GEMM (else 16-bit gradients, then a cast node each)
//   autocast_weight_copies  an autocast region casts the weights the previous one used in one
//                  foreach_copy_ on entry (else one cast per weight at its first use)
//   optimizer_weight_copies  the fused Adam/AdamW step on the CPU writes those copies in its
//                  update pass, and the region takes them (else the region's foreach_copy_)
//   embedding_grad_add  embedding's backward adds its rows in place into a gradient already
//                  gathered for the weight (gpt's tied wte) (else a dense [V, D] sum, then add)
//   classifier_loss  gpt's training loss as one fused_cross_entropy_ over the padded logits,
//                  its gradient written in place (else f32 logits[..., :V] + cross_entropy)
//   residual_layer_norm  the transformer block's residual add and next LayerNorm as one
//                  add_layer_norm node, normalised rows in the autocast dtype under autocast
//                  (else x + y, layer_norm, and the Linear's cast)
//   linear_gelu    the MLP's c_fc and its GELU (tanh) as one linear_gelu dispatch (CUDA: one
//                  cuBLASLt GEMM with the GELU_AUX_BIAS epilogue) (else linear, then gelu)
//   mlp_dgelu      the MLP's c_proj with the GELU's backward in its input-gradient GEMM
//                  (linear_gelu_linear; CUDA: cuBLASLt's DGELU epilogue) (else c_proj's own node
//                  and a GELU node)
//   flash_attention  CUDA bf16/f16 attention forward at head dims 64 and 128 on mma.sync with
//                  S, P and O in registers (tensor/cuda/flash_attention.cuh) (else the WMMA
//                  kernel, which stages S and O through shared memory)
//   flash_ldmatrix  those kernels' (forward and backward) B fragments read by ldmatrix (x4;
//                  tiles kept as rows, read transposed where needed) (else 32-bit shared loads
//                  and transposed tile copies written by 16-bit stores)
#pragma once
#include <string>
#include <string_view>

namespace minidl::variants {

// False when MINIDL_UNFUSED (or set_unfused) names `feature` or says `all`.
bool fused(std::string_view feature);
// Replaces the environment's list (tests); "" turns every fused path back on. Throws on a name
// that is not one of the features above.
void set_unfused(const std::string& list);
// The features named above, comma-separated (for messages and --help texts).
std::string_view feature_names();

}  // namespace minidl::variants
