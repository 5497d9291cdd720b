// The autograd graph: Node (a backward function with edges to the nodes of its inputs),
// AccumulateGrad (the sink for a leaf), SavedTensor (version-checked saved inputs), and the
// AutogradMeta every tensor that takes part in autograd carries.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace minidl {

struct Node;

// Where a gradient flows: input slot `input_nr` of `fn` (fn == nullptr: nowhere).
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

struct Node : std::enable_shared_from_this<Node> {
  Node();
  virtual ~Node() = default;
  // grads[i] is the gradient w.r.t. output i of the forward (undefined: zero); returns one
  // gradient per next_edges entry (undefined where there is none).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grads) = 0;
  virtual std::string name() const = 0;
  // Frees saved tensors (after a backward without retain_graph).
  virtual void release_saved() {}

  std::vector<Edge> next_edges;
  uint32_t num_outputs = 1;  // number of forward outputs (= gradient slots)
  uint64_t sequence_nr;      // creation order: later nodes run first
  // Tensor hooks of non-leaf outputs, per output slot: grad -> replacement (or undefined).
  std::vector<std::vector<std::function<Tensor(const Tensor&)>>> output_hooks;
};

// A saved input or output of the forward; unpack() checks it was not modified in place.
class SavedTensor {
 public:
  SavedTensor() = default;
  // Keeps a history-free alias (same storage and version counter): saving a node's own output
  // must not make output -> grad_fn -> saved -> output a reference cycle.
  explicit SavedTensor(const Tensor& t)
      : tensor_(t.defined() ? t.detach() : t), version_(t.defined() ? t.version() : 0) {}
  // `op` names the backward function for the error message.
  const Tensor& unpack(const Node& node) const;
  // Frees the tensor; a later unpack() explains that the graph was already freed.
  void release() {
    if (tensor_.defined()) released_ = true;
    tensor_ = Tensor();
  }
  bool defined() const { return tensor_.defined(); }

 private:
  Tensor tensor_;
  uint64_t version_ = 0;
  bool released_ = false;
};

// A node whose backward is a closure written in tensor ops (one code path for every device).
struct FunctionNode final : Node {
  using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grads,
                                                       const std::vector<Tensor>& saved)>;
  FunctionNode(std::string name, BackwardFn fn, std::vector<SavedTensor> saved)
      : name_(std::move(name)), fn_(std::move(fn)), saved_(std::move(saved)) {}
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  std::string name() const override { return name_; }
  void release_saved() override;

 private:
  std::string name_;
  BackwardFn fn_;
  std::vector<SavedTensor> saved_;
};

// The sink of a leaf that requires grad: accumulates into leaf.grad, then runs the leaf's
// post-accumulate-grad hooks.
struct AccumulateGrad final : Node {
  explicit AccumulateGrad(Tensor leaf) : leaf_(std::move(leaf)) {}
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }
  const Tensor& leaf() const { return leaf_; }

 private:
  Tensor leaf_;
};

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  uint32_t output_nr = 0;         // which output of grad_fn this tensor is
  bool retains_grad = false;
  std::weak_ptr<AccumulateGrad> accumulator;  // leaves: created on first use
  std::vector<std::function<Tensor(const Tensor&)>> leaf_hooks;
  std::vector<std::function<void(Tensor&)>> post_accumulate_hooks;
};

// ---- helpers used by differentiable functions (autograd/variable.cpp)
namespace autograd {
AutogradMeta* meta(const Tensor& t);         // nullptr when t has none
AutogradMeta& ensure_meta(const Tensor& t);  // creates it on demand
// The edge a gradient for `t` should flow to (its grad_fn slot, or its accumulator).
Edge gradient_edge(const Tensor& t);
// True when grad mode is on and any input requires grad.
bool any_requires_grad(std::initializer_list<const Tensor*> inputs);
// Makes `outputs` the outputs of `node`, connecting node to `inputs` (undefined inputs and
// inputs that do not require grad get invalid edges).
void set_history(const std::vector<Tensor>& inputs, const std::shared_ptr<Node>& node,
                 const std::vector<Tensor*>& outputs);
}  // namespace autograd

}  // namespace minidl
