// The backward engine: counts dependencies from the roots, runs nodes in reverse creation
// order once all their gradients arrived, accumulates into leaves, runs hooks, then the
// queued end-of-backward callbacks. Single-threaded per backward call.
#include "autograd/engine.h"

#include <atomic>
#include <mutex>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "autograd/autocast.h"
#include "autograd/ops.h"

namespace minidl::autograd {
namespace {

thread_local int t_backward_depth = 0;

std::atomic<int> g_census_armed{0};
std::mutex g_census_mutex;
std::vector<LeafUse> g_census;  // the last recorded backward's leaves
thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;
// While run_backward runs a node: the node and the engine's input buffers (gathered_gradient
// looks up its destinations there); null otherwise.
using Buffers = std::unordered_map<Node*, std::vector<Tensor>>;
struct Running {
  const Node* node = nullptr;
  Buffers* buffers = nullptr;
};
thread_local Running t_running;

struct ByLatest {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

// Gradients of roots w.r.t. (node, slot) pairs are captured instead of accumulated.
struct Capture {
  Node* node;
  uint32_t slot;
  size_t index;
};

// True when nothing but the engine holds t (no other handle, no view of its storage).
bool held_by_engine_only(const Tensor& t) {
  return t.impl_ptr().use_count() == 1 && t.storage().use_count() == 1;
}

// buffer[slot] += g. Like torch's InputBuffer, in place when the buffer is the engine's alone,
// contiguous and of the sum's dtype and shape (no new tensor per branch of the graph); else a
// new sum, so that no gradient a caller or a hook holds is ever written.
void accumulate(std::vector<Tensor>& buffer, uint32_t slot, Tensor g) {
  if (!g.defined()) return;
  Tensor& b = buffer[slot];
  if (!b.defined()) {
    b = std::move(g);
  } else if (held_by_engine_only(b) && b.is_contiguous() && b.shape() == g.shape() &&
             b.device() == g.device() && promote_types(b.dtype(), g.dtype()) == b.dtype()) {
    native::add_(b, g);
  } else {
    b = add(b, g);
  }
}

// inputs != nullptr: their gradients are captured and returned. Other leaves are left alone
// (autograd::grad), or accumulated into when accumulate_others (backward_capture); with
// allow_unused an input outside the graph gets an undefined gradient instead of an error.
std::vector<Tensor> execute(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                            bool retain_graph, const std::vector<Tensor>* inputs,
                            bool accumulate_others = false, bool allow_unused = false) {
  MINIDL_CHECK(grads.empty() || grads.size() == roots.size(), "backward: got ", grads.size(),
               " gradients for ", roots.size(), " outputs");
  NoGradGuard no_grad;  // backward formulas are not themselves recorded
  // Backward runs in the forward's dtypes: autocast is off (every device type) while the
  // closures run, even when backward() is called inside an autocast region.
  amp::AutocastStateGuard no_autocast(amp::AutocastState{});
  std::vector<std::pair<Edge, Tensor>> starts;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    MINIDL_CHECK(r.defined() && r.requires_grad(), "backward: element ", i,
                 " of tensors does not require grad and does not have a grad_fn");
    Tensor g = grads.empty() ? Tensor() : grads[i];
    if (!g.defined()) {
      MINIDL_CHECK(r.numel() == 1,
                   "backward: grad can be implicitly created only for scalar "
                   "outputs, but output ",
                   i, " has shape ", r.shape_str());
      g = ones_like(r);
    }
    MINIDL_CHECK(g.shape() == r.shape(), "backward: gradient of shape ", g.shape_str(),
                 " does not match output ", i, " of shape ", r.shape_str());
    starts.emplace_back(gradient_edge(r), g);
  }
  // Dependencies: number of incoming edges per node reachable from the roots.
  std::unordered_map<Node*, int> deps;
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  for (auto& [e, g] : starts)
    if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
  // Leaf census (run_backward only, while an optimizer awaits its first step).
  const bool census = inputs == nullptr && g_census_armed.load(std::memory_order_relaxed) > 0;
  std::vector<LeafUse> leaves;
  std::unordered_map<const TensorImpl*, size_t> leaf_index;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.valid()) continue;
      ++deps[e.fn.get()];
      if (census)
        if (const auto* acc = dynamic_cast<const AccumulateGrad*>(e.fn.get())) {
          auto [it, fresh] = leaf_index.try_emplace(acc->leaf().impl(), leaves.size());
          if (fresh)
            leaves.push_back({acc->leaf().impl_ptr(), n->name(), n->sequence_nr});
          else if (n->sequence_nr < leaves[it->second].sequence_nr)
            leaves[it->second] = {acc->leaf().impl_ptr(), n->name(), n->sequence_nr};
        }
      if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }
  if (census) {
    std::lock_guard<std::mutex> lock(g_census_mutex);
    g_census = std::move(leaves);
  }
  std::vector<Capture> captures;
  std::vector<Tensor> captured;
  if (inputs) {
    captured.resize(inputs->size());
    for (size_t i = 0; i < inputs->size(); ++i) {
      MINIDL_CHECK((*inputs)[i].requires_grad(), "grad: input ", i, " does not require grad");
      Edge e = gradient_edge((*inputs)[i]);
      if (allow_unused && !seen.count(e.fn.get())) continue;
      MINIDL_CHECK(seen.count(e.fn.get()), "grad: input ", i,
                   " was not used in the graph of the outputs");
      captures.push_back({e.fn.get(), e.input_nr, i});
    }
  }
  Buffers buffers;
  auto buffer_of = [&](Node* n) -> std::vector<Tensor>& {
    auto& b = buffers[n];
    if (b.empty()) b.resize(n->num_outputs);
    return b;
  };
  for (auto& [e, g] : starts) accumulate(buffer_of(e.fn.get()), e.input_nr, g);
  std::priority_queue<Node*, std::vector<Node*>, ByLatest> ready;
  for (auto& [e, g] : starts)
    if (deps[e.fn.get()] == 0) {
      deps[e.fn.get()] = -1;  // queued once
      ready.push(e.fn.get());
    }
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    std::vector<Tensor> in = std::move(buffer_of(n));
    buffers.erase(n);
    for (size_t slot = 0; slot < n->output_hooks.size() && slot < in.size(); ++slot)
      for (auto& hook : n->output_hooks[slot])
        if (in[slot].defined())
          if (Tensor r = hook(in[slot]); r.defined()) in[slot] = r;
    bool skip = false;
    for (const Capture& c : captures)
      if (c.node == n) {
        if (in[c.slot].defined()) captured[c.index] = in[c.slot];
        skip = skip || dynamic_cast<AccumulateGrad*>(n) != nullptr;
      }
    if (inputs && !accumulate_others && dynamic_cast<AccumulateGrad*>(n))
      skip = true;  // grad() leaves .grad alone
    std::vector<Tensor> out;
    if (!skip) {
      // run_backward: the next nodes' buffers, for backwards that add into them in place
      const Running prev = t_running;
      t_running = inputs ? Running{} : Running{n, &buffers};
      struct Restore {
        Running prev;
        ~Restore() { t_running = prev; }
      } restore{prev};
      out = n->apply(std::move(in));
    }
    if (!retain_graph && !skip) n->release_saved();
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      const Edge& e = n->next_edges[i];
      if (!e.valid()) continue;
      if (i < out.size()) accumulate(buffer_of(e.fn.get()), e.input_nr, std::move(out[i]));
      if (--deps[e.fn.get()] == 0) {
        deps[e.fn.get()] = -1;
        ready.push(e.fn.get());
      }
    }
  }
  return captured;
}

// Runs the callbacks queued during the outermost backward of this thread.
template <typename F>
auto with_callbacks(F&& body) {
  std::vector<std::function<void()>> callbacks;
  auto* prev = t_callbacks;
  const bool outermost = t_backward_depth == 0;
  if (outermost) t_callbacks = &callbacks;
  ++t_backward_depth;
  struct Restore {
    std::vector<std::function<void()>>* prev;
    bool outermost;
    ~Restore() {
      --t_backward_depth;
      if (outermost) t_callbacks = prev;
    }
  } restore{prev, outermost};
  auto result = body();
  if (outermost)
    for (size_t i = 0; i < callbacks.size(); ++i) callbacks[i]();  // may queue more
  return result;
}

}  // namespace

Tensor* gathered_gradient(size_t i) {
  if (!t_running.node || i >= t_running.node->next_edges.size()) return nullptr;
  const Edge& e = t_running.node->next_edges[i];
  if (!e.valid()) return nullptr;
  auto it = t_running.buffers->find(e.fn.get());
  if (it == t_running.buffers->end() || e.input_nr >= it->second.size()) return nullptr;
  Tensor* t = &it->second[e.input_nr];
  if (!t->defined() || !t->is_contiguous() || !held_by_engine_only(*t)) return nullptr;
  return t;
}

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph) {
  with_callbacks([&] { return execute(roots, grads, retain_graph, nullptr); });
}

std::vector<Tensor> grad(const std::vector<Tensor>& roots, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_roots, bool retain_graph) {
  return with_callbacks([&] { return execute(roots, grad_roots, retain_graph, &inputs); });
}

std::vector<Tensor> backward_capture(const std::vector<Tensor>& roots,
                                     const std::vector<Tensor>& grad_roots,
                                     const std::vector<Tensor>& inputs) {
  return with_callbacks([&] { return execute(roots, grad_roots, false, &inputs, true, true); });
}

void queue_callback(std::function<void()> cb) {
  MINIDL_CHECK(t_callbacks, "queue_callback: no backward is running in this thread");
  t_callbacks->push_back(std::move(cb));
}

bool in_backward() {
  return t_backward_depth > 0;
}

void arm_leaf_census() {
  g_census_armed.fetch_add(1, std::memory_order_relaxed);
}

void disarm_leaf_census() {
  if (g_census_armed.fetch_sub(1, std::memory_order_relaxed) == 1) {
    std::lock_guard<std::mutex> lock(g_census_mutex);
    g_census.clear();
  }
}

bool leaf_census_armed() {
  return g_census_armed.load(std::memory_order_relaxed) > 0;
}

std::vector<LeafUse> last_backward_leaves() {
  std::lock_guard<std::mutex> lock(g_census_mutex);
  return g_census;
}

}  // namespace minidl::autograd
