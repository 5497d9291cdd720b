// CPU kernels: embedding, index_select, gather (restrided element copies), scatter_add and
// embedding_backward (deterministic, race-free accumulation), topk (per-row partial sort).
// Index tensors are int64 (the frontends convert int32); ranges are validated before writing.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>
#include <vector>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/dispatch.h"
#include "tensor/ops.h"

namespace minidl::cpu {
namespace {

// Throws "op `gather`: index 7 is out of bounds for dimension 0 with size 5" for the first
// index (row-major) outside [0, size). Parallel scan without throwing, then a serial rescan
// to name the first bad value.
void check_index_range(const Tensor& index, int64_t size, int64_t dim, std::string_view op) {
  if (index.numel() == 0) return;
  std::atomic<bool> bad{false};
  for_each_row<1>({&index}, [&](std::array<char*, 1> p, std::array<int64_t, 1> s, int64_t n) {
    bool local = false;
    for (int64_t i = 0; i < n; ++i) {
      int64_t v = *reinterpret_cast<const int64_t*>(p[0] + i * s[0]);
      local |= (v < 0) | (v >= size);
    }
    if (local) bad.store(true, std::memory_order_relaxed);
  });
  if (!bad.load()) return;
  for (int64_t v : index.tolist<int64_t>())
    MINIDL_CHECK(v >= 0 && v < size, "op `", op, "`: index ", v, " is out of bounds for dimension ",
                 dim, " with size ", size);
}

// out[p] = src[p + index[p] * src_dim_stride] for every position p of out's shape; src and
// index are already restrided to out's shape (src with stride 0 along the indexed dim).
void gather_loop(Tensor& out, const Tensor& src, const Tensor& index, int64_t src_dim_stride) {
  dispatch_bits(out.element_size(), [&]<typename B>() {
    const int64_t jump = src_dim_stride * int64_t(sizeof(B));
    for_each_row<3>({&out, &src, &index}, [&](std::array<char*, 3> p, std::array<int64_t, 3> s,
                                              int64_t n) {
      if (s[2] == 0) {  // one index for the whole row: a strided row copy
        const char* from = p[1] + *reinterpret_cast<const int64_t*>(p[2]) * jump;
        if (s[0] == sizeof(B) && s[1] == sizeof(B)) {
          std::memcpy(p[0], from, size_t(n) * sizeof(B));
        } else {
          for (int64_t i = 0; i < n; ++i)
            *reinterpret_cast<B*>(p[0] + i * s[0]) = *reinterpret_cast<const B*>(from + i * s[1]);
        }
        return;
      }
      for (int64_t i = 0; i < n; ++i) {
        int64_t v = *reinterpret_cast<const int64_t*>(p[2] + i * s[2]);
        *reinterpret_cast<B*>(p[0] + i * s[0]) =
            *reinterpret_cast<const B*>(p[1] + i * s[1] + v * jump);
      }
    });
  });
}

// x: any shape; index: 1-D int64 [m]; out: x's shape with size m at dim.
void index_select_impl(const Tensor& x, int64_t dim, const Tensor& index, Tensor& out,
                       std::string_view op) {
  check_index_range(index, x.size(dim), dim, op);
  if (out.numel() == 0) return;
  Strides xs = x.strides(), is(size_t(out.dim()), 0);
  xs[dim] = 0;
  is[dim] = index.stride(0);
  Tensor src = native::as_strided(x, out.shape(), xs, x.storage_offset());
  Tensor idx = native::as_strided(index, out.shape(), is, index.storage_offset());
  gather_loop(out, src, idx, x.stride(dim));
}

void index_select_kernel(const Tensor& x, int64_t dim, const Tensor& index, Tensor& out) {
  index_select_impl(x, dim, index, out, "index_select");
}

// weight:[V,D], indices: any shape -> out:[*indices, D]
void embedding_kernel(const Tensor& weight, int64_t, const Tensor& indices, Tensor& out) {
  const int64_t n = indices.numel();
  Tensor o = native::view(out, {n, weight.size(1)});
  index_select_impl(weight, 0, native::reshape(indices, {n}), o, "embedding");
}

// x, index, out: same rank; out has index's shape; index.size(d) <= x.size(d) for d != dim.
void gather_kernel(const Tensor& x, int64_t dim, const Tensor& index, Tensor& out) {
  check_index_range(index, x.size(dim), dim, "gather");
  if (out.numel() == 0) return;
  Strides xs = x.strides();
  xs[dim] = 0;
  Tensor src = native::as_strided(x, index.shape(), xs, x.storage_offset());
  gather_loop(out, src, index, x.stride(dim));
}

// Element offsets of one position given per-dim sizes/strides and a row-major linear number.
inline int64_t offset_of(int64_t linear, const Shape& sizes, const Strides& strides) {
  int64_t off = 0;
  for (int64_t d = int64_t(sizes.size()) - 1; d >= 0; --d) {
    off += (linear % sizes[d]) * strides[d];
    linear /= sizes[d];
  }
  return off;
}

// out[..., index[p], ...] += src[p] along dim, over index's shape. Work items are lines along
// `dim` (times blocks of the last dim when dim is not last): an output element only receives
// values from one item, summed in index order, so the result is deterministic and race-free.
void scatter_add_kernel(Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  check_index_range(index, out.size(dim), dim, "scatter_add");
  if (index.numel() == 0) return;
  const int64_t nd = index.dim();
  const int64_t vdim = dim == nd - 1 ? -1 : nd - 1;  // vectorised inner dim, if any
  const int64_t L = index.size(dim), C = vdim < 0 ? 1 : index.size(vdim);
  const int64_t so_v = vdim < 0 ? 0 : out.stride(vdim), ss_v = vdim < 0 ? 0 : src.stride(vdim),
                si_v = vdim < 0 ? 0 : index.stride(vdim);
  const int64_t so_d = out.stride(dim), ss_d = src.stride(dim), si_d = index.stride(dim);
  Shape osz;
  Strides oso, oss, osi;  // outer dims: all but dim and vdim
  for (int64_t d = 0; d < nd; ++d) {
    if (d == dim || d == vdim) continue;
    osz.push_back(index.size(d));
    oso.push_back(out.stride(d));
    oss.push_back(src.stride(d));
    osi.push_back(index.stride(d));
  }
  const int64_t kBlock = 256;
  const int64_t nblocks = (C + kBlock - 1) / kBlock, items = shape_numel(osz) * nblocks;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, L * C));
  dispatch_all(out.dtype(), "scatter_add", [&]<typename T>() {
    T* po = out.data_ptr<T>();
    const T* ps = src.data_ptr<T>();
    const int64_t* pi = index.data_ptr<int64_t>();
    parallel_for(items, grain, [&](int64_t begin, int64_t end) {
      for (int64_t item = begin; item < end; ++item) {
        const int64_t outer = item / nblocks, c0 = (item % nblocks) * kBlock;
        const int64_t c1 = std::min(C, c0 + kBlock);
        T* o = po + offset_of(outer, osz, oso);
        const T* s = ps + offset_of(outer, osz, oss);
        const int64_t* ix = pi + offset_of(outer, osz, osi);
        for (int64_t j = 0; j < L; ++j) {
          for (int64_t c = c0; c < c1; ++c) {
            T& dst = o[ix[j * si_d + c * si_v] * so_d + c * so_v];
            const T v = s[j * ss_d + c * ss_v];
            if constexpr (std::is_same_v<T, bool>)
              dst = dst || v;
            else
              dst = T(static_cast<opmath_t<T>>(dst) + static_cast<opmath_t<T>>(v));
          }
        }
      }
    });
  });
}

// grad_out:[*indices, D], indices int64 -> grad_weight:[V, D] (overwritten). Positions are
// bucketed by index (counting sort), then rows are summed in parallel, each in position
// order: deterministic and race-free. Row padding_idx (if >= 0) gets zero. accumulate: the
// indexed rows (not padding_idx) get row + T(sum), the others are left as they are.
void embedding_backward_kernel(const Tensor& grad_out, const Tensor& indices, Tensor& grad_weight,
                               int64_t padding_idx, bool accumulate) {
  const int64_t V = grad_weight.size(0), D = grad_weight.size(1), N = indices.numel();
  check_index_range(indices, V, 0, "embedding_backward");
  std::vector<int64_t> idx = indices.tolist<int64_t>();
  std::vector<int64_t> start(size_t(V) + 1, 0), order(static_cast<size_t>(N));
  for (int64_t v : idx) ++start[size_t(v) + 1];
  for (int64_t v = 0; v < V; ++v) start[size_t(v) + 1] += start[size_t(v)];
  {
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t p = 0; p < N; ++p) order[size_t(fill[size_t(idx[size_t(p)])]++)] = p;
  }
  const Tensor g = native::reshape(grad_out, {N, D});
  const int64_t gs0 = g.stride(0), gs1 = g.stride(1);
  const int64_t ws0 = grad_weight.stride(0), ws1 = grad_weight.stride(1);
  const int64_t avg = std::max<int64_t>(1, (N / std::max<int64_t>(V, 1) + 1) * D);
  dispatch_numeric(grad_weight.dtype(), "embedding_backward", [&]<typename T>() {
    using A = std::conditional_t<std::is_same_v<T, bool>, int, opmath_t<T>>;  // bool: never run
    const T* pg = g.data_ptr<T>();
    T* pw = grad_weight.data_ptr<T>();
    parallel_for(V, std::max<int64_t>(1, kParallelGrain / avg), [&](int64_t begin, int64_t end) {
      std::vector<A> acc(static_cast<size_t>(D));
      for (int64_t v = begin; v < end; ++v) {
        const bool indexed = v != padding_idx && start[size_t(v)] < start[size_t(v) + 1];
        if (accumulate && !indexed) continue;
        std::fill(acc.begin(), acc.end(), A(0));
        if (indexed) {
          for (int64_t k = start[size_t(v)]; k < start[size_t(v) + 1]; ++k) {
            const T* row = pg + order[size_t(k)] * gs0;
            for (int64_t c = 0; c < D; ++c) acc[size_t(c)] += static_cast<A>(row[c * gs1]);
          }
        }
        T* w = pw + v * ws0;
        if (accumulate) {
          for (int64_t c = 0; c < D; ++c)
            w[c * ws1] = T(static_cast<A>(w[c * ws1]) + static_cast<A>(T(acc[size_t(c)])));
        } else {
          for (int64_t c = 0; c < D; ++c) w[c * ws1] = T(acc[size_t(c)]);
        }
      }
    });
  });
}

// topk along dim: values/indices have x's shape with size k at dim. Order: largest (or
// smallest) first, NaN counts as the largest value, ties keep the lower index first.
void topk_kernel(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted, Tensor& values,
                 Tensor& indices) {
  if (values.numel() == 0) return;
  const int64_t n = x.size(dim), nd = x.dim();
  Shape osz;
  Strides osx, osv, osi;
  for (int64_t d = 0; d < nd; ++d) {
    if (d == dim) continue;
    osz.push_back(x.size(d));
    osx.push_back(x.stride(d));
    osv.push_back(values.stride(d));
    osi.push_back(indices.stride(d));
  }
  const int64_t rows = shape_numel(osz);
  const int64_t xs = x.stride(dim), vs = values.stride(dim), is = indices.stride(dim);
  dispatch_numeric(x.dtype(), "topk", [&]<typename T>() {
    using A = opmath_t<T>;
    using Entry = std::pair<A, int64_t>;
    auto greater = [](A a, A b) {
      if constexpr (is_float_v<T>) {
        if (std::isnan(a)) return !std::isnan(b);
        if (std::isnan(b)) return false;
      }
      return a > b;
    };
    // Strict total order (indices are unique), so partial_sort/nth_element are deterministic.
    auto before = [&](const Entry& a, const Entry& b) {
      const bool ab = largest ? greater(a.first, b.first) : greater(b.first, a.first);
      const bool ba = largest ? greater(b.first, a.first) : greater(a.first, b.first);
      return ab || (!ba && a.second < b.second);
    };
    const T* px = x.data_ptr<T>();
    T* pv = values.data_ptr<T>();
    int64_t* pi = indices.data_ptr<int64_t>();
    parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n, 1)),
                 [&](int64_t begin, int64_t end) {
                   std::vector<Entry> buf(static_cast<size_t>(n));
                   for (int64_t r = begin; r < end; ++r) {
                     const T* row = px + offset_of(r, osz, osx);
                     for (int64_t i = 0; i < n; ++i) buf[size_t(i)] = {A(row[i * xs]), i};
                     if (k * 16 < n) {
                       std::partial_sort(buf.begin(), buf.begin() + k, buf.end(), before);
                     } else {
                       std::nth_element(buf.begin(), buf.begin() + (k - 1), buf.end(), before);
                       if (sorted) std::sort(buf.begin(), buf.begin() + k, before);
                     }
                     T* v = pv + offset_of(r, osz, osv);
                     int64_t* ix = pi + offset_of(r, osz, osi);
                     for (int64_t j = 0; j < k; ++j) {
                       ix[j * is] = buf[size_t(j)].second;
                       v[j * vs] = row[buf[size_t(j)].second * xs];
                     }
                   }
                 });
  });
}

}  // namespace

void register_index_kernels() {
  register_kernel<Op::embedding>(DeviceType::cpu, embedding_kernel);
  register_kernel<Op::embedding_backward>(DeviceType::cpu, embedding_backward_kernel);
  register_kernel<Op::index_select>(DeviceType::cpu, index_select_kernel);
  register_kernel<Op::gather>(DeviceType::cpu, gather_kernel);
  register_kernel<Op::scatter_add>(DeviceType::cpu, scatter_add_kernel);
  register_kernel<Op::topk>(DeviceType::cpu, topk_kernel);
}

}  // namespace minidl::cpu
