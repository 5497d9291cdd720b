// Every loss in one place (PyTorch semantics): the functional forms in nn::functional (= F::,
// also callable unqualified as minidl::mse_loss like cross_entropy) and the loss Modules.
#pragma once
#include <string>

#include "nn/module.h"
#include "autograd/ops.h"
#include "tensor/warning.h"

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
// The regression losses below broadcast target against input like PyTorch, and like PyTorch
// they warn when the shapes differ (e.g. input [4,1] with target [4] gives a [4,4] loss):
// "[minidl] warning: mse_loss: using a target size [4] that is different to the input size
// [4, 1] ...", once per call site (`caller`; leave it defaulted).
// (input - target)^2.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean,
                SourceLocation caller = SourceLocation::current());
// |input - target|.
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean,
               SourceLocation caller = SourceLocation::current());
// d = |input - target|: 0.5 d^2 / beta where d < beta, else d - 0.5 beta (beta = 0: l1_loss).
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target,
                      Reduction reduction = Reduction::mean, double beta = 1.0,
                      SourceLocation caller = SourceLocation::current());
// d = |input - target|: 0.5 d^2 where d < delta, else delta (d - 0.5 delta).
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean,
                  double delta = 1.0, SourceLocation caller = SourceLocation::current());
// Probabilities input in [0, 1] (after a sigmoid): -w (y log x + (1 - y) log(1 - x)), each log
// clamped to >= -100 as in PyTorch. target must have input's shape (PyTorch refuses others);
// weight broadcasts to it. Prefer binary_cross_entropy_with_logits (stable, autocast-safe).
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                            Reduction reduction = Reduction::mean);
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

class L1Loss : public Loss<L1Loss> {
 public:
  explicit L1Loss(Reduction r = Reduction::mean);
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string name() const override { return "L1Loss"; }
};

class SmoothL1Loss : public Loss<SmoothL1Loss> {
 public:
  explicit SmoothL1Loss(Reduction r = Reduction::mean, double beta = 1.0);
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string name() const override { return "SmoothL1Loss"; }
  double beta;
};

class HuberLoss : public Loss<HuberLoss> {
 public:
  explicit HuberLoss(Reduction r = Reduction::mean, double delta = 1.0);
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string name() const override { return "HuberLoss"; }
  double delta;
};

// input: probabilities (after a sigmoid); weight rescales each element (a buffer when defined).
class BCELoss : public Loss<BCELoss> {
 public:
  explicit BCELoss(Tensor weight = {}, Reduction r = Reduction::mean);
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string name() const override { return "BCELoss"; }
  Tensor weight;
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

namespace minidl {
// Unqualified like cross_entropy (autograd/ops.h): mse_loss(pred, y), l1_loss(pred, y), ...
using nn::functional::binary_cross_entropy;
using nn::functional::binary_cross_entropy_with_logits;
using nn::functional::huber_loss;
using nn::functional::l1_loss;
using nn::functional::mse_loss;
using nn::functional::nll_loss;
using nn::functional::smooth_l1_loss;
}  // namespace minidl
