// F::pad (torch.nn.functional.pad): constant, reflect, replicate and circular padding with
// PyTorch's pad list order (last dim first: {left, right, top, bottom, front, back}); negative pads
// crop. nn::utils::rnn::pad_sequence batches sequences of different lengths.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace minidl::nn::functional {

// "constant": any input, up to x.dim() padded dims, fills `value` (default 0).
// "reflect" / "replicate" / "circular": pads the last len(pad)/2 = 1, 2 or 3 dims of an input
// with one or two more dims ([C,W]/[N,C,W], [C,H,W]/[N,C,H,W], [C,D,H,W]/[N,C,D,H,W]); reflect
// needs each pad < the dim's size; circular wraps each pad around the kept part of the dim (the
// input less any negative pad's crop) at most once; they take no value. Composites (cat, narrow,
// index_select).
Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, const std::string& mode = "constant",
           std::optional<double> value = std::nullopt);

}  // namespace minidl::nn::functional

namespace minidl::nn::utils::rnn {

// torch.nn.utils.rnn.pad_sequence(sequences, batch_first, padding_value, padding_side):
// sequences[i]:[L_i, *] (same trailing dims * and device) -> [max L, B, *], or [B, max L, *] with
// batch_first; each sequence is padded with padding_value at its end ("right") or start
// ("left", PyTorch >= 2.6) and cast to sequences[0]'s dtype. Differentiable (pad + stack).
// For a DataLoader collate_fn over variable-length samples.
Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first = false,
                    double padding_value = 0.0, const std::string& padding_side = "right");

}  // namespace minidl::nn::utils::rnn
