// The differentiable fused classifier loss: the raw op of tensor/ops/fused_cross_entropy.cpp
// (loss + in-place dlogits) and one node whose backward scales that buffer in place.
#include "nn/fused_cross_entropy.h"

#include <memory>
#include <set>
#include <string>

#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "tensor/ops.h"

namespace minidl::nn::functional {
namespace {

// Whether t is a leaf or a view (through view nodes only) of a leaf: the in-place gradient
// would overwrite a leaf's values. (A reshape that copied is refused too: conservative.)
bool leaf_or_view_of_leaf(const Tensor& t) {
  static const std::set<std::string> views = {
      "ViewBackward",    "ReshapeBackward",  "PermuteBackward", "TransposeBackward",
      "NarrowBackward",  "SliceBackward",    "SelectBackward",  "ExpandBackward",
      "SqueezeBackward", "UnsqueezeBackward"};
  if (t.is_leaf()) return true;
  std::shared_ptr<Node> n = t.grad_fn();
  while (n && views.count(n->name()) && n->next_edges.size() == 1) {
    n = n->next_edges[0].fn;
    if (n && n->name() == "AccumulateGrad") return true;
  }
  return false;
}

}  // namespace

Tensor fused_cross_entropy_(const Tensor& logits, const Tensor& target, int64_t num_classes,
                            int64_t ignore_index) {
  constexpr std::string_view op = "fused_cross_entropy_";
  MINIDL_CHECK(logits.defined() && logits.dim() >= 2, "op `", op,
               "`: expected logits [N, Vp] or [B, T, Vp], got ",
               logits.defined() ? logits.shape_str() : "undefined");
  const int64_t V = num_classes < 0 ? logits.size(-1) : num_classes;
  if (!GradMode::is_enabled() || !logits.requires_grad())
    return native::fused_cross_entropy(logits, target, V, ignore_index);
  MINIDL_CHECK(!leaf_or_view_of_leaf(logits), "op `", op, "`: the logits ", logits.shape_str(),
               " are a leaf that requires grad (or a view of one); the in-place gradient would "
               "overwrite its values (use cross_entropy, or pass the output of the layer that "
               "computes the logits)");
  Tensor buf = logits.detach();  // same storage and version counter, no history
  Tensor loss = native::fused_cross_entropy_(buf, target, V, ignore_index);
  // Saved after the write (version checked at backward): a later in-place change of the
  // logits, or a second backward (the first scaled the buffer), is refused by the engine.
  autograd::record("FusedCrossEntropyBackward", {logits}, {&loss}, {buf},
                   [](const std::vector<Tensor>& g, const std::vector<Tensor>& s) {
                     if (!g[0].defined()) return std::vector<Tensor>{Tensor()};
                     Tensor grad = s[0];
                     native::fused_cross_entropy_backward_(grad, g[0]);
                     return std::vector<Tensor>{grad};
                   });
  return loss;
}

}  // namespace minidl::nn::functional
