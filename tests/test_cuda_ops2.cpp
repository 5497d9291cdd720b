// Parity tables (cuda_ops suite, run from test_cuda_ops.cpp) for conv, pooling,
// normalisation, losses, indexing, topk and random ops: each op's frontend on CUDA vs CPU.
#include "cuda_parity.h"

using namespace minidl;
using namespace parity;

namespace {

using V = std::vector<Tensor>;

Conv2dParams conv_params(int v, int64_t groups) {
  Conv2dParams p;
  p.groups = groups;
  if (v == 1) p.stride[0] = p.stride[1] = 2, p.padding[0] = p.padding[1] = 1;
  if (v == 2) p.dilation[0] = p.dilation[1] = 2, p.padding[0] = p.padding[1] = 2;
  if (v == 3) p.stride[0] = 2, p.padding[1] = 1;
  return p;
}

// Max pooling variants: 2x2; 3x3 stride 2 pad 1; the same with ceil_mode; 2x2 dilation 2.
Pool2dParams max_params(int v) {
  Pool2dParams p = v == 0 ? pool2d_params(2) : pool2d_params(3, 2, 1);
  if (v == 2) p.ceil_mode = true;
  if (v == 3) p = pool2d_params(2, 1), p.dilation[0] = p.dilation[1] = 2;
  return p;
}
// Average pooling variants: 2x2; 3x3/2 pad 1 with and without padding counted; ceil_mode;
// divisor_override.
Pool2dParams avg_params(int v) {
  Pool2dParams p = v == 0 ? pool2d_params(2) : pool2d_params(3, 2, 1);
  if (v == 2) p.count_include_pad = false;
  if (v == 3) p.ceil_mode = true, p.count_include_pad = false;
  if (v == 4) p.divisor_override = 3;
  return p;
}

// Whether elements share memory (a stride-0 dim of size > 1): in-place writes would race.
bool overlapping(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) > 1 && t.stride(d) == 0) return true;
  return false;
}

const std::vector<std::vector<Shape>> kPoolShapes = {
    {{2, 3, 9, 9}}, {{1, 2, 8, 7}}, {{0, 3, 6, 6}}, {{2, 3, 33, 32}}};

}  // namespace

namespace parity {

std::vector<Case> cases_nn() {
  std::vector<Case> cs;
  Case conv{"conv2d",
            {"conv2d", "conv2d_backward_input", "conv2d_backward_weight"},
            {{{2, 4, 9, 9}, {6, 4, 3, 3}, {6}},
             {{1, 3, 8, 11}, {5, 3, 1, 1}, {5}},
             {{2, 4, 9, 9}, {6, 2, 3, 3}, {6}},  // groups = 2
             {{3, 2, 16, 16}, {8, 2, 5, 5}, {8}},
             {{0, 4, 9, 9}, {6, 4, 3, 3}, {6}}},
            kFloats,
            [](const V& in, Device dev, int v) {
              const Tensor &x = in[0], &w = in[1], &b = in[2];
              Conv2dParams p = conv_params(v, x.size(1) / w.size(1));
              Tensor y = conv2d(x, w, b, p);
              Tensor g = rnd(y.shape(), y.dtype(), 99, dev);
              return V{y, conv2d(x, w, {}, p), conv2d_backward_input(g, w, x.shape(), p),
                       conv2d_backward_weight(g, x, w.shape(), p)};
            }};
  conv.variants = 4;
  conv.tol_scale = 3;
  cs.push_back(conv);

  Case maxp{"max_pool2d", {"max_pool2d"}, kPoolShapes, kAll, [](const V& in, Device, int v) {
              auto [y, ix] = max_pool2d_with_indices(in[0], max_params(v));
              return V{y, ix, max_pool2d(in[0], max_params(v))};
            }};
  maxp.variants = 4;
  maxp.exact = true;  // values and indices (ties: the first maximum of the window, like CPU)
  maxp.rejects = {{kNonFloat, {}, "op `max_pool2d`: expected a floating input"}};
  cs.push_back(maxp);
  Case maxb{"max_pool2d_backward",
            {"max_pool2d_backward"},
            kPoolShapes,
            kAll,
            [](const V& in, Device dev, int v) {
              auto [y, ix] = max_pool2d_with_indices(in[0], max_params(v));
              Tensor g = rnd(y.shape(), y.dtype(), 98, dev);
              return V{max_pool2d_backward(g, ix, in[0].shape(), max_params(v))};
            }};
  maxb.variants = 4;
  maxb.rejects = maxp.rejects;
  cs.push_back(maxb);
  Case avgp{"avg_pool2d",
            {"avg_pool2d", "avg_pool2d_backward"},
            kPoolShapes,
            kAll,
            [](const V& in, Device dev, int v) {
              Tensor y = avg_pool2d(in[0], avg_params(v));
              Tensor g = rnd(y.shape(), y.dtype(), 97, dev);
              return V{y, avg_pool2d_backward(g, in[0].shape(), avg_params(v))};
            }};
  avgp.variants = 5;
  avgp.rejects = {{kNonFloat, {}, "op `avg_pool2d`: expected a floating input"}};
  cs.push_back(avgp);

  Case ln{"layer_norm",
          {"layer_norm", "layer_norm_backward"},
          {{{4, 7, 10}, {10}, {10}},
           {{3, 1024}, {1024}, {1024}},
           {{2, 3, 4, 5}, {4, 5}, {4, 5}},
           {{0, 10}, {10}, {10}},
           {{5, 3}, {3}, {3}}},
          kFloats,
          [](const V& in, Device dev, int v) {
            const Tensor& x = in[0];
            const Shape ns = in[1].shape();
            Tensor w = v == 0 ? in[1] : Tensor(), b = v == 0 ? in[2] : Tensor();
            LayerNormResult r = layer_norm(x, ns, w, b, 1e-5);
            Tensor g = rnd(x.shape(), x.dtype(), 96, dev);
            LayerNormGrads gr = layer_norm_backward(g, x, ns, r.mean, r.rstd, w, v == 0);
            return V{r.out, r.mean, r.rstd, gr.grad_x, gr.grad_w, gr.grad_b};
          }};
  ln.variants = 2;
  ln.tol_scale = 2;
  cs.push_back(ln);

  // batch norm: training with and without running stats (updated in place), eval mode.
  Case bn{"batch_norm",
          {"batch_norm", "batch_norm_backward"},
          {{{4, 3, 5, 5}, {3}, {3}},
           {{8, 3}, {3}, {3}},
           {{2, 16, 7, 9}, {16}, {16}},
           {{64, 5}, {5}, {5}}},
          kFloats,
          [](const V& in, Device dev, int v) {
            const Tensor &x = in[0], &w = in[1], &b = in[2];
            const int64_t c = x.size(1);
            Tensor rm = rnd({c}, x.dtype(), 94, dev), rv = rnd({c}, x.dtype(), 93, dev, 0.5, 2);
            if (v == 1) rm = rv = Tensor();
            const bool training = v != 2;
            BatchNormResult r = batch_norm(x, w, b, rm, rv, training, 0.1, 1e-5);
            Tensor g = rnd(x.shape(), x.dtype(), 95, dev);
            BatchNormGrads gr =
                batch_norm_backward(g, x, w, rm, rv, r.save_mean, r.save_invstd, training, 1e-5);
            return V{r.out, r.save_mean, r.save_invstd, rm, rv, gr.grad_x, gr.grad_w, gr.grad_b};
          }};
  bn.variants = 3;
  bn.tol_scale = 3;
  cs.push_back(bn);

  // cross entropy: reductions, ignore_index, label smoothing, spatial targets.
  Case ce{
      "cross_entropy",
      {"cross_entropy", "cross_entropy_backward"},
      {{{8, 10}}, {{4, 5, 3, 3}}, {{0, 10}}, {{300, 1000}}, {{1, 2}}},
      kFloats,
      [](const V& in, Device dev, int v) {
        const Tensor& x = in[0];
        Shape ts = x.shape();
        ts.erase(ts.begin() + 1);
        Tensor t = idx(ts, x.size(1), 92, dev);
        const Reduction red[] = {Reduction::mean, Reduction::sum, Reduction::none, Reduction::mean};
        const int64_t ignore[] = {-100, 1, -100, 0};
        const double smooth[] = {0, 0, 0.1, 0.2};
        auto r = cross_entropy_forward(x, t, red[v], ignore[v], smooth[v]);
        Tensor gl = red[v] == Reduction::none ? rnd(r.loss.shape(), r.loss.dtype(), 91, dev)
                                              : scalar_tensor(1.5, r.loss.dtype(), dev);
        Tensor gx = cross_entropy_backward(gl, x, t, r.lse, red[v], ignore[v], smooth[v]);
        return V{r.loss, r.lse, gx, cross_entropy(x, t, red[v], ignore[v], smooth[v])};
      }};
  ce.variants = 4;
  ce.tol_scale = 3;
  cs.push_back(ce);
  return cs;
}

std::vector<Case> cases_index_random() {
  std::vector<Case> cs;
  Case emb{"embedding",
           {"embedding", "embedding_backward"},
           {{{10, 4}}, {{1000, 64}}, {{7, 1}}},
           kAll,
           [](const V& in, Device dev, int v) {
             const Tensor& w = in[0];
             const Shape shapes[] = {{3, 5}, {300}, {0}};
             Tensor ix = idx(shapes[v], w.size(0), 90 + uint64_t(v), dev);
             Tensor out = embedding(w, ix);
             Tensor g = rnd(out.shape(), out.dtype(), 89, dev);
             return V{out, embedding_backward(g, ix, w.size(0)),
                      embedding_backward(g, ix, w.size(0), 1)};
           }};
  emb.variants = 3;
  emb.rejects = {{{kBool}, {}, "op `embedding_backward`: grad_out has dtype bool"}};
  cs.push_back(emb);

  const std::vector<std::vector<Shape>> xs = {{{6, 5}}, {{4, 5, 6}}, {{0, 3}}, {{300, 70}}};
  Case sel{"index_select and gather",
           {"index_select", "gather"},
           xs,
           kAll,
           [](const V& in, Device dev, int v) {
             const Tensor& x = in[0];
             if (v >= x.dim() || x.size(v) == 0) return V{};
             Tensor ix = idx({7}, x.size(v), 88, dev);
             Shape gs = x.shape();
             gs[size_t(v)] = 4;
             Tensor gx = idx(gs, x.size(v), 87, dev);
             V out{index_select(x, v, ix), gather(x, v, gx)};
             if (gx.size(0) > 0) out.push_back(gather(x, v, gx.narrow(0, 0, 1)));
             return out;
           }};
  sel.variants = 3;
  sel.exact = true;
  cs.push_back(sel);
  Case sca{"scatter_add", {"scatter_add"}, xs, kAll, [](const V& in, Device dev, int v) {
             const Tensor& x = in[0];
             if (v >= x.dim() || x.size(v) == 0) return V{};
             Shape is = x.shape();
             is[size_t(v)] = 9;  // more entries than x has along v: duplicates accumulate
             Tensor ix = idx(is, x.size(v), 86, dev);
             Tensor src = rnd(is, x.dtype(), 85, dev);
             return V{scatter_add(x, v, ix, src)};
           }};
  sca.variants = 3;
  sca.tol_scale = 3;
  cs.push_back(sca);

  // topk: values exact; indices must point at those values (ties may order differently in
  // principle, so indices are compared exactly only for f32/f64 random data without ties).
  Case tk{"topk",
          {"topk"},
          {{{10}}, {{6, 20}}, {{3, 4, 50}}, {{2, 2000}}, {{3, 0}}},
          kAll,
          [](const V& in, Device, int v) {
            const Tensor& x = in[0];
            const int64_t dim = v == 1 ? 0 : -1, n = x.size(dim);
            const int64_t k = std::min<int64_t>(n, v == 3 ? 0 : v == 1 ? 1 : 5);
            auto [val, ix] = topk(x, k, dim, v != 1, v != 2);
            Tensor picked = gather(x, dim, ix);  // the values the indices point at
            if (v == 2) {                        // unsorted: compare in value order
              val = topk(val, k, dim, true, true).first;
              picked = topk(picked, k, dim, true, true).first;
            }
            V out{val, picked};
            const bool no_ties = (x.dtype() == kFloat32 || x.dtype() == kFloat64) &&
                                 (n <= 1 || x.stride(dim) != 0);  // expanded: all equal
            if (v != 2 && no_ties) out.push_back(ix);
            return out;
          }};
  tk.variants = 4;
  tk.rejects = {{{kBool}, {}, "op `topk`: not implemented for dtype bool"}};
  tk.exact = true;
  cs.push_back(tk);

  const std::vector<std::vector<Shape>> rs = {{{1}}, {{7}}, {{1001}}, {{33, 65}}};
  Case rng{"uniform, bernoulli, randint",
           {"uniform", "bernoulli", "randint"},
           rs,
           kAll,
           [](const V& in, Device dev, int v) {
             Generator g(42 + uint64_t(v));
             const Shape& s = in[0].shape();
             const DType dt = in[0].dtype();
             Tensor t;
             if (v == 0) t = rand(s, dt, dev, &g);
             if (v == 1) t = bernoulli(s, 0.4, dt, dev, &g);
             if (v == 2) t = randint(-3, 9, s, dt == kBool || dt == kUInt8 ? kInt64 : dt, dev, &g);
             if (v == 3) t = dropout_mask(s, 0.3, dt, dev, &g);
             if (v == 4) {  // in place into a (possibly strided) tensor
               if (overlapping(in[0])) return V{};
               t = in[0];
               uniform_(t, -1, 3, &g);
             }
             return V{t, scalar_tensor(int64_t(g.offset()), kInt64, dev)};
           }};
  rng.variants = 5;
  rng.rejects = {{kNonFloat, {0}, "op `rand` needs a floating dtype"},
                 {kNonFloat, {3}, "op `dropout_mask` needs a floating dtype"},
                 {kNonFloat, {4}, "op `uniform_` needs a floating dtype"}};
  rng.exact = true;
  cs.push_back(rng);
  Case nrm{"normal", {"normal"}, rs, kAll, [](const V& in, Device dev, int v) {
             Generator g(7 + uint64_t(v));
             if (v == 1 && overlapping(in[0])) return V{};
             Tensor t = v == 0 ? randn(in[0].shape(), in[0].dtype(), dev, &g) : in[0];
             if (v == 1) normal_(t, 1.5, 0.25, &g);
             return V{t, scalar_tensor(int64_t(g.offset()), kInt64, dev)};
           }};
  nrm.variants = 2;
  nrm.rejects = {{kNonFloat, {0}, "op `randn` needs a floating dtype"},
                 {kNonFloat, {1}, "op `normal_` needs a floating dtype"}};
  cs.push_back(nrm);
  return cs;
}

}  // namespace parity
