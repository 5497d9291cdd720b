// Loss functions (PyTorch semantics): functional forms in minidl::nn::functional built from
// differentiable ops, and the loss Modules (CrossEntropyLoss, NLLLoss, MSELoss, BCEWithLogitsLoss).
#pragma once
#include <string>

#include "nn/module.h"
#include "autograd/ops.h"

namespace minidl::nn {

// "none" | "mean" | "sum" -> Reduction (throws on anything else).
Reduction parse_reduction(std::string_view s);

namespace functional {

// logits:[N,C] / [N,C,d1..] / [C], target int64 class indices, or floating class
// probabilities of the logits' shape (torch's soft targets).
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     Reduction reduction = Reduction::mean, int64_t ignore_index = -100,
                     double label_smoothing = 0.0);
// log_probs:[N,C] / [N,C,d1..] / [C]; loss_i = -log_probs[i, target_i]; mean divides by the
// number of non-ignored targets.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target,
                Reduction reduction = Reduction::mean, int64_t ignore_index = -100);
// (input - target)^2 (broadcasting like PyTorch).
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// Stable max(x,0) - x*y + log1p(exp(-|x|)); pos_weight ([C], broadcast over the last dim)
// scales the positive term; weight rescales each element.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const Tensor& weight = {},
                                        Reduction reduction = Reduction::mean,
                                        const Tensor& pos_weight = {});

}  // namespace functional

// Base of the loss modules (CRTP for clone()): forward(input, target); the one-argument
// Module::forward throws.
template <class Derived>
class Loss : public Cloneable<Derived> {
 public:
  using Module::forward;
  using Module::operator();
  virtual Tensor forward(const Tensor& input, const Tensor& target) = 0;
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  std::string extra_repr() const override { return ""; }
  Reduction reduction = Reduction::mean;
};

class CrossEntropyLoss : public Loss<CrossEntropyLoss> {
 public:
  explicit CrossEntropyLoss(Reduction r = Reduction::mean, int64_t ignore_index = -100,
                            double label_smoothing = 0.0);
  Tensor forward(const Tensor& logits, const Tensor& target) override;
  std::string name() const override { return "CrossEntropyLoss"; }
  int64_t ignore_index;
  double label_smoothing;
};

class NLLLoss : public Loss<NLLLoss> {
 public:
  explicit NLLLoss(Reduction r = Reduction::mean, int64_t ignore_index = -100);
  Tensor forward(const Tensor& log_probs, const Tensor& target) override;
  std::string name() const override { return "NLLLoss"; }
  int64_t ignore_index;
};

class MSELoss : public Loss<MSELoss> {
 public:
  explicit MSELoss(Reduction r = Reduction::mean);
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string name() const override { return "MSELoss"; }
};

class BCEWithLogitsLoss : public Loss<BCEWithLogitsLoss> {
 public:
  // pos_weight: [C] broadcast over the last dim (registered as a buffer when defined).
  explicit BCEWithLogitsLoss(Reduction r = Reduction::mean, Tensor pos_weight = {});
  Tensor forward(const Tensor& logits, const Tensor& target) override;
  std::string name() const override { return "BCEWithLogitsLoss"; }
  Tensor pos_weight;
};

}  // namespace minidl::nn
