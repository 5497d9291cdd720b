// F::pad: constant padding as narrow (crop) + cat with filled blocks, reflect/replicate/circular
// as one index_select per padded dim with PyTorch's source indices (gradients scatter-add back);
// pad_sequence as a constant pad of each sequence's dim 0 and a stack.
#include "nn/padding.h"

#include <algorithm>

#include "autograd/ops.h"

namespace minidl::nn::functional {

namespace {

std::string pad_str(const std::vector<int64_t>& pad) {
  std::string s = "(";
  for (size_t i = 0; i < pad.size(); ++i) s += (i ? ", " : "") + std::to_string(pad[i]);
  return s + ")";
}

Tensor constant_pad(const Tensor& x, const std::vector<int64_t>& pad, double value) {
  MINIDL_CHECK(int64_t(pad.size()) / 2 <= x.dim(), "Padding length too large: ", pad_str(pad),
               " for an input of shape ", x.shape_str());
  Tensor out = x;
  for (size_t k = 0; k < pad.size() / 2; ++k) {
    const int64_t dim = x.dim() - 1 - int64_t(k);
    const int64_t l = pad[2 * k], r = pad[2 * k + 1];
    const int64_t n = out.size(dim);
    const int64_t new_size = n + l + r;
    MINIDL_CHECK(new_size >= 0, "pad: the padded size of dim ", dim, " would be ", new_size,
                 " (input shape ", x.shape_str(), ", pad ", pad_str(pad), ")");
    // crop first (negative pads), then add the filled blocks
    const int64_t start = std::max<int64_t>(-l, 0), stop = n - std::max<int64_t>(-r, 0);
    if (start > 0 || stop < n) out = out.narrow(dim, start, std::max<int64_t>(stop - start, 0));
    if (l <= 0 && r <= 0) continue;
    std::vector<Tensor> parts;
    Shape s = out.shape();
    if (l > 0) {
      s[size_t(dim)] = l;
      parts.push_back(full(s, Scalar(value), x.dtype(), x.device()));
    }
    parts.push_back(out);
    if (r > 0) {
      s[size_t(dim)] = r;
      parts.push_back(full(s, Scalar(value), x.dtype(), x.device()));
    }
    out = cat(parts, dim);
  }
  return out;
}

}  // namespace

Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, const std::string& mode,
           std::optional<double> value) {
  MINIDL_CHECK(x.defined(), "pad: undefined input");
  MINIDL_CHECK(pad.size() % 2 == 0, "Padding length must be divisible by 2, got ", pad_str(pad));
  if (mode == "constant") return constant_pad(x, pad, value.value_or(0.0));
  MINIDL_CHECK(mode == "reflect" || mode == "replicate" || mode == "circular", "pad: mode '", mode,
               "' is not supported (constant | reflect | replicate | circular)");
  MINIDL_CHECK(!value || *value == 0, "Padding mode \"", mode, "\" doesn't take in value argument");
  const int64_t k = int64_t(pad.size()) / 2;
  MINIDL_CHECK(k >= 1 && k <= 3 && (x.dim() == k + 1 || x.dim() == k + 2),
               "Only 2D, 3D, 4D, 5D padding with non-constant padding are supported for now (",
               mode, " pad ", pad_str(pad), " on an input of shape ", x.shape_str(),
               ": a pad of length 2/4/6 needs a 2-3/3-4/4-5 dim input)");
  Tensor out = x;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t dim = x.dim() - 1 - j;
    const int64_t l = pad[size_t(2 * j)], r = pad[size_t(2 * j + 1)];
    const int64_t n = x.size(dim), new_size = n + l + r;
    if (mode == "reflect")
      MINIDL_CHECK(l < n && r < n, "Argument #4: Padding size should be less than the ",
                   "corresponding input dimension, but got: padding (", l, ", ", r,
                   ") at dimension ", dim, " of input ", x.shape_str());
    MINIDL_CHECK(new_size >= 1 && n >= 1, "pad: input size ", n, " of dim ", dim, " padded by (", l,
                 ", ", r, ") gives output size ", new_size,
                 "; both must be at least 1 (input shape ", x.shape_str(), ")");
    // circular: the pads wrap around the kept part (the input less its cropped ends), once.
    const int64_t crop_l = std::max<int64_t>(-l, 0), kept = n - crop_l - std::max<int64_t>(-r, 0);
    if (mode == "circular")
      MINIDL_CHECK(l <= kept && r <= kept,
                   "Padding value causes wrapping around more than once: ", "padding (", l, ", ", r,
                   ") at dimension ", dim, " of input ", x.shape_str(), " leaves ", kept,
                   " element(s) to wrap");
    if (l == 0 && r == 0) continue;
    std::vector<int64_t> idx(static_cast<size_t>(new_size));
    for (int64_t o = 0; o < new_size; ++o) {
      int64_t v = o - l;  // the position in the unpadded input
      if (mode == "reflect") {
        if (v < 0) v = -v;
        if (v >= n) v = 2 * (n - 1) - v;
      } else if (mode == "circular") {
        v = crop_l + ((o - std::max<int64_t>(l, 0)) % kept + kept) % kept;
      } else {
        v = std::clamp<int64_t>(v, 0, n - 1);
      }
      idx[size_t(o)] = v;
    }
    out = index_select(out, dim, tensor(idx).to(x.device()));
  }
  return out;
}

}  // namespace minidl::nn::functional

namespace minidl::nn::utils::rnn {

Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first, double padding_value,
                    const std::string& padding_side) {
  MINIDL_CHECK(!sequences.empty(), "pad_sequence: received an empty list of sequences");
  MINIDL_CHECK(padding_side == "right" || padding_side == "left",
               "pad_sequence: Expected padding_side to be one of left or right, but got ",
               padding_side, ".");
  const Tensor& first = sequences[0];
  MINIDL_CHECK(first.defined() && first.dim() >= 1,
               "pad_sequence: sequence 0 must have at least one dim (its length), got ",
               first.defined() ? first.shape_str() : std::string("an undefined tensor"));
  int64_t max_len = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const Tensor& s = sequences[i];
    MINIDL_CHECK(s.defined(), "pad_sequence: sequence ", i, " is undefined");
    bool same_tail = s.dim() == first.dim();
    for (int64_t d = 1; same_tail && d < s.dim(); ++d) same_tail = s.size(d) == first.size(d);
    MINIDL_CHECK(same_tail, "pad_sequence: sequence ", i, " has shape ", s.shape_str(),
                 "; every sequence must be [L, *] with the trailing dims of sequence 0, ",
                 first.shape_str());
    MINIDL_CHECK(s.device() == first.device(), "pad_sequence: sequence ", i, " is on ",
                 s.device().str(), ", sequence 0 on ", first.device().str());
    max_len = std::max(max_len, s.size(0));
  }
  std::vector<Tensor> padded;
  padded.reserve(sequences.size());
  for (const Tensor& s : sequences) {
    Tensor t = s.dtype() == first.dtype() ? s : cast(s, first.dtype());
    const int64_t extra = max_len - t.size(0);
    if (extra > 0) {
      // dim 0 is the last pair of F::pad's list (last dim first).
      std::vector<int64_t> pads(size_t(2 * t.dim()), 0);
      pads[size_t(2 * (t.dim() - 1) + (padding_side == "left" ? 0 : 1))] = extra;
      t = functional::pad(t, pads, "constant", padding_value);
    }
    padded.push_back(t);
  }
  return stack(padded, batch_first ? 0 : 1);
}

}  // namespace minidl::nn::utils::rnn
