// The backward engine: dependency-counted execution of the graph from the roots, gradient
// accumulation, hooks, and a queue of end-of-backward callbacks (DDP uses both).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/node.h"

namespace minidl::autograd {

// Runs backward from `roots` with initial gradients `grads` (same length). Frees saved
// tensors of every executed node unless retain_graph.
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph);

// Computes and returns d(roots)/d(inputs) without touching .grad (torch.autograd.grad).
std::vector<Tensor> grad(const std::vector<Tensor>& roots, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_roots = {}, bool retain_graph = false);

// A backward that returns the gradients of `inputs` (undefined for one the roots do not reach)
// instead of accumulating them, and accumulates into every other leaf as run_backward does
// (activation checkpointing's recomputed graph: autograd/checkpoint.h). Frees the graph.
std::vector<Tensor> backward_capture(const std::vector<Tensor>& roots,
                                     const std::vector<Tensor>& grad_roots,
                                     const std::vector<Tensor>& inputs);

// While the engine runs a node's backward (run_backward only): the gradient already gathered
// for the node's output `i` (the next node's input; a leaf's: the sum that will go to .grad)
// when nothing else holds it, is contiguous and is defined; else nullptr. A backward may add
// its gradient for output i into it in place and return an undefined gradient for i
// (embedding's backward scatters a few rows into a tied weight's dense gradient this way).
Tensor* gathered_gradient(size_t i);

// Queues `cb` to run once when the current backward finishes (throws outside a backward).
void queue_callback(std::function<void()> cb);
bool in_backward();  // whether this thread is running a backward

// Leaf census for the optimizers' first-step registration check (nn/registration_check.h):
// while armed (a count: each optimizer arms it until its first step), every run_backward
// records the leaves it reaches, each with its first (earliest created) consumer. One walk the
// engine makes anyway; nothing is recorded while disarmed.
struct LeafUse {
  std::weak_ptr<TensorImpl> leaf;
  std::string used_by;       // the consumer's name, e.g. "AddmmBackward"
  uint64_t sequence_nr = 0;  // the consumer's creation order
};
void arm_leaf_census();
void disarm_leaf_census();
bool leaf_census_armed();
// The leaves of the last recorded backward (any thread), in the order the walk met them.
std::vector<LeafUse> last_backward_leaves();

}  // namespace minidl::autograd
