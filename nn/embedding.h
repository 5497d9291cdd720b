// Embedding lookup table (torch.nn.Embedding): weight [num_embeddings, embedding_dim] ~ N(0,1);
// the padding_idx row starts at zero and never receives gradient.
#pragma once
#include <optional>

#include "nn/module.h"
#include "autograd/ops.h"

namespace minidl::nn {

namespace functional {
// weight:[V,D], indices int of any shape -> [*indices, D]; padding_idx (normalised, >= 0)
// gets no gradient.
Tensor embedding(const Tensor& indices, const Tensor& weight,
                 std::optional<int64_t> padding_idx = std::nullopt);
}  // namespace functional

class Embedding : public Cloneable<Embedding> {
 public:
  // padding_idx may be negative (counts from num_embeddings).
  Embedding(int64_t num_embeddings, int64_t embedding_dim,
            std::optional<int64_t> padding_idx = std::nullopt);
  Tensor forward(const Tensor& indices) override;
  std::string name() const override { return "Embedding"; }
  std::string extra_repr() const override;
  int64_t num_embeddings, embedding_dim;
  std::optional<int64_t> padding_idx;  // normalised to [0, num_embeddings)
  Tensor weight;
};

}  // namespace minidl::nn
