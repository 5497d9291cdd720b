// The fused classifier loss for language-model heads (llm.c's fused_classifier): the mean
// cross-entropy of [N,Vp] logits over their first V columns whose backward needs no extra
// [N,Vp] tensor: the logits' gradient is written over the logits during the forward.
#pragma once
#include <cstdint>

#include "tensor/tensor.h"

namespace minidl::nn::functional {

// logits:[N,Vp] or [B,T,Vp] (contiguous; f16/bf16/f32/f64), target int64 [N] or [B,T]
// -> the 0-d mean loss (f32; f64 for f64 logits) of cross_entropy(logits[..., :V], target,
// ignore_index) over the rows whose target != ignore_index (NaN when all are ignored). V =
// num_classes (-1: Vp); columns V..Vp (padding) take no part. Under autocast the logits stay in
// their dtype (no f32 copy); row log-sum-exps accumulate in f32 (f64 for f64).
// In place (the trailing underscore): when grad mode is on and logits requires grad, the
// LOGITS' VALUES ARE GONE afterwards: the buffer holds d(loss)/d(logits) = (softmax -
// onehot(target)) / n_valid (0 in the padded columns and ignored rows), and the one recorded
// node (FusedCrossEntropyBackward) scales it in place by the incoming gradient and passes it
// on as the logits' gradient. Refused for a leaf that requires grad (its values would be lost)
// and for non-contiguous logits (e.g. the slice logits[..., :V]: pass the padded tensor). A
// tensor that saved the logits for its own backward fails that backward with the version
// error. One backward only (the buffer is consumed). Otherwise (no grad) the logits are left
// untouched.
Tensor fused_cross_entropy_(const Tensor& logits, const Tensor& target, int64_t num_classes = -1,
                            int64_t ignore_index = -100);

}  // namespace minidl::nn::functional
