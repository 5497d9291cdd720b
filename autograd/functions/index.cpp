// The differentiable indexing ops: embedding, index_select, gather, scatter_add(_), topk run
// their raw op (tensor/ops/index.cpp) and record their backward (scatter-adds into zeros);
// integer outputs never get history.
#include "autograd/autocast.h"
#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/ops.h"
#include "tensor/variants.h"

namespace minidl {
namespace {

// embedding's weight gradient: [V, D] from grad_out:[*ids, D]. A tied weight (gpt's wte)
// already holds the classifier's dense gradient when this runs: the indexed rows are added into
// it in place and nothing is returned, instead of a dense sum and an add.
Tensor embedding_weight_grad(const Tensor& grad_out, const Tensor& ids, int64_t v) {
  Tensor* gathered = autograd::gathered_gradient(0);
  if (gathered && variants::fused("embedding_grad_add") && gathered->dtype() == grad_out.dtype() &&
      gathered->device() == grad_out.device() && gathered->dim() == 2 && gathered->size(0) == v &&
      gathered->size(1) == grad_out.size(-1)) {
    native::embedding_backward_add_(*gathered, grad_out, ids, -1);
    return Tensor();
  }
  return embedding_backward(grad_out, ids, v, -1);
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  Tensor out = native::embedding(weight, indices);
  if (autograd::any_requires_grad({&weight})) {
    Tensor idx = native::contiguous(native::to(indices, kInt64));  // the indices the raw op used
    autograd::record("EmbeddingBackward", {weight}, {&out}, {idx},
                     [v = weight.size(0)](const auto& g, const auto& s) {
                       return std::vector<Tensor>{embedding_weight_grad(g[0], s[0], v)};
                     });
  }
  return out;
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = native::index_select(x, dim, index);
  if (!autograd::any_requires_grad({&x})) return out;
  if (x.dim() == 0) {
    autograd::record("IndexSelectBackward", {x}, {&out}, {}, [](const auto& g, const auto&) {
      return std::vector<Tensor>{g[0].clone()};  // the single index must be 0
    });
    return out;
  }
  const int64_t d = wrap_dim(dim, x.dim(), "index_select");
  Tensor idx = native::reshape(native::to(index, kInt64), {index.numel()});  // as the raw op's
  // grad_x = index_add(zeros, d, index, g): scatter_add_ with the index expanded to g's shape
  autograd::record("IndexSelectBackward", {x}, {&out}, {idx},
                   [in = x.shape(), d](const auto& g, const auto& s) {
                     Shape ishape(in.size(), 1);
                     ishape[size_t(d)] = s[0].numel();
                     Tensor gx = zeros(in, g[0].dtype(), g[0].device());
                     scatter_add_(gx, d, s[0].view(ishape).expand(g[0].shape()), g[0]);
                     return std::vector<Tensor>{gx};
                   });
  return out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = native::gather(x, dim, index);
  if (autograd::any_requires_grad({&x})) {
    const int64_t d = wrap_dim(dim, x.dim(), "gather");
    autograd::record("GatherBackward", {x}, {&out}, {index},
                     [in = x.shape(), d](const auto& g, const auto& s) {
                       Tensor gx = zeros(in, g[0].dtype(), g[0].device());
                       scatter_add_(gx, d, s[0], g[0]);
                       return std::vector<Tensor>{gx};
                     });
  }
  return out;
}

Tensor& scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  autograd::check_inplace("scatter_add_", self, src);
  return native::scatter_add_(self, dim, index, src);
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::scatter_add>(x, index, src))
    return scatter_add(ac[0], dim, ac[1], ac[2]);
  Tensor out = native::scatter_add(x, dim, index, src);
  if (autograd::any_requires_grad({&x, &src})) {
    // grad_x = g; grad_src = g gathered at index (zeros where src is larger than index)
    const int64_t d = wrap_dim(dim, x.dim(), "scatter_add");
    autograd::record("ScatterAddBackward", {x, src}, {&out}, {index},
                     [d, sshape = src.shape()](const auto& g, const auto& s) {
                       Tensor gs = gather(g[0], d, s[0]);
                       if (gs.shape() != sshape && gs.numel() == shape_numel(sshape)) {
                         gs = gs.reshape(sshape);  // 0-d / [1] mixing
                       } else if (gs.shape() != sshape) {
                         Tensor z = zeros(sshape, gs.dtype(), gs.device());
                         Tensor r = z;
                         for (int64_t k = 0; k < gs.dim(); ++k) r = r.narrow(k, 0, gs.size(k));
                         r.copy_(gs);
                         gs = z;
                       }
                       return std::vector<Tensor>{g[0], gs};
                     });
  }
  return out;
}

// values + int64 indices of the k largest (smallest) entries along dim; the values get
// history (dx: zeros of x's shape with the values' grad at the indices).
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  auto [values, indices] = native::topk(x, k, dim, largest, sorted);
  if (x.dim() == 0 && k == 0) return {values, indices};  // the empty [0] result: no history
  if (is_floating(x.dtype())) {
    const int64_t d = wrap_dim(dim, x.dim(), "topk");
    autograd::record("TopkBackward", {x}, {&values}, {indices},
                     [shape = x.shape(), d](const auto& g, const auto& s) {
                       if (shape.empty()) return std::vector<Tensor>{g[0].reshape({})};
                       Tensor z = zeros(shape, g[0].dtype(), g[0].device());
                       return std::vector<Tensor>{scatter_add(z, d, s[0], g[0])};
                     });
  }
  return {values, indices};
}

}  // namespace minidl
