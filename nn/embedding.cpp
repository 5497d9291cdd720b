// Embedding: the embedding op's forward with one autograd node whose backward skips the
// padding row (embedding_backward with padding_idx).
#include "nn/embedding.h"

#include "autograd/function.h"

namespace minidl::nn {

namespace functional {
Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx) {
  if (!padding_idx) return minidl::embedding(weight, indices);
  MINIDL_CHECK(weight.defined() && weight.dim() == 2,
               "op `embedding`: 'weight' must be 2-D, got shape ",
               weight.defined() ? weight.shape_str() : std::string("undefined"));
  int64_t pad = *padding_idx;
  const int64_t V = weight.size(0);
  MINIDL_CHECK(pad >= -V && pad < V, "op `embedding`: padding_idx ", pad,
               " out of range for num_embeddings ", V);
  if (pad < 0) pad += V;
  Tensor out = native::embedding(weight, indices);
  Tensor idx = native::contiguous(native::to(indices, kInt64));
  autograd::record("EmbeddingBackward", {weight}, {&out}, {idx},
                   [V, pad](const auto& g, const auto& s) {
                     return std::vector<Tensor>{embedding_backward(g[0], s[0], V, pad)};
                   });
  return out;
}
}  // namespace functional

Embedding::Embedding(int64_t num, int64_t dim, std::optional<int64_t> pad)
    : num_embeddings(num), embedding_dim(dim) {
  MINIDL_CHECK(num > 0 && dim > 0, "Embedding: num_embeddings and embedding_dim must be positive, ",
               "got ", num, " and ", dim);
  if (pad) {
    MINIDL_CHECK(*pad >= -num && *pad < num, "Embedding: padding_idx ", *pad,
                 " must be within num_embeddings ", num);
    padding_idx = *pad < 0 ? *pad + num : *pad;
  }
  weight = empty({num, dim}, kFloat32);
  normal_(weight, 0.0, 1.0);
  if (padding_idx) weight.select(0, *padding_idx).zero_();
  register_parameter("weight", &weight);
}

Tensor Embedding::forward(const Tensor& indices) {
  return functional::embedding(indices, weight, padding_idx);
}

std::string Embedding::extra_repr() const {
  std::string s = std::to_string(num_embeddings) + ", " + std::to_string(embedding_dim);
  if (padding_idx) s += ", padding_idx=" + std::to_string(*padding_idx);
  return s;
}

}  // namespace minidl::nn
