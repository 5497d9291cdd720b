// CPU kernels: reductions (sum, mean, amax, amin, logsumexp, var) and max/min along a dim.
// Reduced dims are brought last (permute; a copy only when the view is not contiguous) and each
// row of length K is reduced; long rows are split in fixed chunks reduced in parallel and merged
// in order, so results do not depend on the thread count. f16/bf16 are read in place and widened
// to f32 one chunk (<= kChunk elements, a per-task buffer) or one element at a time.
#include <Eigen/Core>
#include <cmath>
#include <limits>
#include <vector>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/dispatch.h"
#include "tensor/ops.h"

namespace minidl::cpu {
namespace {

constexpr int64_t kChunk = 32768;  // elements of one row reduced by one task
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

template <typename T>
using ArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// The type the reducers compute on for storage type S: f32 for f16/bf16, else S itself.
template <typename S>
using compute_t = std::conditional_t<is_reduced_float_v<S>, float, S>;

// x viewed as rows: element (o, k) at data[o*K + k]; o runs over the kept dims in order.
struct Rows {
  Tensor t;  // keeps the (possibly copied) data alive
  int64_t outer = 1, K = 1;
};

Rows make_rows(const Tensor& in, const DimList& dims) {
  const int64_t nd = in.dim();
  std::vector<bool> red(size_t(nd), false);
  for (int64_t d : dims) red[size_t(d)] = true;
  DimList perm;
  Rows r;
  for (int64_t d = 0; d < nd; ++d)
    if (!red[size_t(d)]) perm.push_back(d), r.outer *= in.size(d);
  for (int64_t d = 0; d < nd; ++d)
    if (red[size_t(d)]) perm.push_back(d), r.K *= in.size(d);
  Tensor p = nd == 0 ? in : native::permute(in, perm);
  r.t = p.is_contiguous() ? p : native::contiguous(p);
  return r;
}

// NaN-propagating "v is strictly better than cur" for max (IsMax) or min.
template <bool IsMax, typename T>
inline bool better(T v, T cur) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(v)) return !std::isnan(cur);
  }
  return IsMax ? v > cur : v < cur;
}

// ---- reducers: partial(chunk pointer, n, offset in row) -> State; merge(earlier, later);
// finish(State, K) -> Out. Reducers with init()/step() also support the column path.
template <typename T>
struct SumR {
  using State = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
  using Out = State;
  State partial(const T* p, int64_t n, int64_t) const {
    if constexpr (std::is_floating_point_v<T>) {
      double a[8] = {};  // independent accumulators: vectorisable, pairwise-like accuracy
      int64_t i = 0;
      for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) a[j] += double(p[i + j]);
      double s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
      for (; i < n; ++i) s += double(p[i]);
      return s;
    } else {
      int64_t s = 0;
      for (int64_t i = 0; i < n; ++i) s += int64_t(p[i]);
      return s;
    }
  }
  State merge(State a, State b) const { return a + b; }
  Out finish(State s, int64_t) const { return s; }
  State init() const { return State(0); }
  State step(State s, T v) const { return s + State(v); }
};

template <typename T>
struct MeanR : SumR<T> {
  using Out = double;
  Out finish(double s, int64_t K) const { return s / double(K); }  // K = 0 gives NaN
};

template <typename T, bool IsMax>
struct ExtremeR {
  using State = T;
  using Out = T;
  State init() const {
    if constexpr (std::is_floating_point_v<T>)
      return IsMax ? T(-kInf) : T(kInf);
    else
      return IsMax ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
  }
  State step(State s, T v) const { return better<IsMax>(v, s) ? v : s; }
  State partial(const T* p, int64_t n, int64_t) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (n == 0) return init();
      ArrayMap<T> a(p, n);
      return IsMax ? a.template maxCoeff<Eigen::PropagateNaN>()
                   : a.template minCoeff<Eigen::PropagateNaN>();
    } else {
      State s = init();
      for (int64_t i = 0; i < n; ++i) s = IsMax ? std::max(s, p[i]) : std::min(s, p[i]);
      return s;
    }
  }
  State merge(State a, State b) const { return step(a, b); }
  Out finish(State s, int64_t) const { return s; }
};

// logsumexp: State = (max m, sum of exp(x - m0)) with m0 = m when finite, else 0.
template <typename T>
struct LseR {
  struct State {
    double m, s;
  };
  using Out = double;
  State partial(const T* p, int64_t n, int64_t) const {
    if (n == 0) return {-kInf, 0.0};
    ArrayMap<T> a(p, n);
    const T m = a.template maxCoeff<Eigen::PropagateNaN>();
    if (std::isnan(m)) return {kNaN, kNaN};
    if (std::isinf(m)) return {double(m), m > 0 ? kInf : 0.0};
    constexpr int64_t B = 256;
    T buf[B];
    double s = 0;
    for (int64_t i = 0; i < n; i += B) {
      const int64_t len = std::min(B, n - i);
      Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> e(buf, len);
      e = (a.segment(i, len) - m).exp();
      s += SumR<T>{}.partial(buf, len, 0);
    }
    return {double(m), s};
  }
  State merge(State a, State b) const {
    if (a.m == -kInf) return b;
    if (b.m == -kInf) return a;
    if (std::isnan(a.m) || std::isnan(b.m)) return {kNaN, kNaN};
    if (a.m == kInf || b.m == kInf) return {kInf, kInf};
    const double m = std::max(a.m, b.m);
    return {m, a.s * std::exp(a.m - m) + b.s * std::exp(b.m - m)};
  }
  Out finish(State st, int64_t) const {
    if (std::isnan(st.m) || std::isinf(st.m)) return st.m;
    return std::log(st.s) + st.m;
  }
};

// var: State = (count, mean, sum of squared deviations); chunks merged with Chan's formula.
template <typename T>
struct VarR {
  double correction = 1;
  struct State {
    double n, mean, m2;
  };
  using Out = double;
  State partial(const T* p, int64_t n, int64_t) const {
    if (n == 0) return {0.0, 0.0, 0.0};
    const double mean = SumR<T>{}.partial(p, n, 0) / double(n);
    double a[4] = {};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
      for (int j = 0; j < 4; ++j) {
        const double d = double(p[i + j]) - mean;
        a[j] += d * d;
      }
    double m2 = (a[0] + a[1]) + (a[2] + a[3]);
    for (; i < n; ++i) m2 += (double(p[i]) - mean) * (double(p[i]) - mean);
    return {double(n), mean, m2};
  }
  State merge(State a, State b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const double n = a.n + b.n, delta = b.mean - a.mean;
    return {n, a.mean + delta * (b.n / n), a.m2 + b.m2 + delta * delta * (a.n * b.n / n)};
  }
  Out finish(State s, int64_t K) const {
    if (K == 0) return kNaN;
    return s.m2 / std::max(0.0, double(K) - correction);  // 0 divisor: inf or NaN (as PyTorch)
  }
};

// partial() of chunk [beg, beg+n) of a row stored as S: on the data itself when S is the compute
// type, else on a copy widened into buf (n <= kChunk floats), with the same arithmetic.
template <typename S, typename R, typename U>
typename R::State partial_of(const R& r, const S* p, int64_t n, int64_t beg, std::vector<U>& buf) {
  if constexpr (std::is_same_v<S, U>) {
    return r.partial(p, n, beg);
  } else {
    buf.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) buf[size_t(i)] = U(p[i]);
    return r.partial(buf.data(), n, beg);
  }
}

// Reduces each row of x:[outer, K] (stored as S) into out[o].
template <typename S, typename R>
void reduce_rows(const S* x, int64_t outer, int64_t K, const R& r, typename R::Out* out) {
  using State = typename R::State;
  using U = compute_t<S>;
  if (outer == 0) return;
  const int64_t nchunks = K <= kChunk ? 1 : (K + kChunk - 1) / kChunk;
  if (nchunks == 1) {
    parallel_for(outer, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(K, 1)),
                 [&](int64_t b, int64_t e) {
                   std::vector<U> buf;
                   for (int64_t o = b; o < e; ++o)
                     out[o] = r.finish(partial_of(r, x + o * K, K, 0, buf), K);
                 });
    return;
  }
  std::vector<State> part(size_t(outer * nchunks));
  parallel_for(outer * nchunks, 1, [&](int64_t b, int64_t e) {
    std::vector<U> buf;
    for (int64_t i = b; i < e; ++i) {
      const int64_t o = i / nchunks, beg = (i % nchunks) * kChunk;
      part[size_t(i)] = partial_of(r, x + o * K + beg, std::min(kChunk, K - beg), beg, buf);
    }
  });
  for (int64_t o = 0; o < outer; ++o) {
    State s = part[size_t(o * nchunks)];
    for (int64_t c = 1; c < nchunks; ++c) s = r.merge(s, part[size_t(o * nchunks + c)]);
    out[o] = r.finish(s, K);
  }
}

// Column path: x:[O, K, M] contiguous reduced over its middle dim with init()/step(), tiles of
// kTile adjacent columns vectorised across M; elements stored as S are widened one at a time.
template <typename S, typename R>
void reduce_cols(const S* x, int64_t O, int64_t K, int64_t M, const R& r, typename R::Out* out) {
  using State = typename R::State;
  constexpr int64_t kTile = 256;
  const int64_t tiles = (M + kTile - 1) / kTile;
  parallel_for(O * tiles, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(K * kTile, 1)),
               [&](int64_t b, int64_t e) {
                 State acc[kTile];
                 for (int64_t i = b; i < e; ++i) {
                   const int64_t o = i / tiles, j0 = (i % tiles) * kTile;
                   const int64_t len = std::min(kTile, M - j0);
                   for (int64_t j = 0; j < len; ++j) acc[j] = r.init();
                   for (int64_t k = 0; k < K; ++k) {
                     const S* row = x + (o * K + k) * M + j0;
                     for (int64_t j = 0; j < len; ++j)
                       acc[j] = r.step(acc[j], compute_t<S>(row[j]));
                   }
                   for (int64_t j = 0; j < len; ++j) out[o * M + j0 + j] = r.finish(acc[j], K);
                 }
               });
}

// Runs fn(A* buffer) where the buffer is out's data when out is contiguous of dtype A, else a
// temporary copied (with cast) into out afterwards.
template <typename A, typename Fn>
void with_out_buffer(Tensor& out, Fn&& fn) {
  if (out.is_contiguous() && out.dtype() == dtype_of<A>()) {
    fn(static_cast<A*>(out.data_ptr()));
    return;
  }
  Tensor tmp = empty(out.shape(), dtype_of<A>());
  fn(tmp.data_ptr<A>());
  native::copy_(out, tmp);
}

// dims form one run [a..b] of a contiguous x with enough trailing kept elements M for the column
// path: x viewed as [O, K, M].
bool middle_run(const Tensor& x, const DimList& dims, int64_t& O, int64_t& K, int64_t& M) {
  if (!x.is_contiguous() || dims.empty() || dims.back() - dims.front() + 1 != int64_t(dims.size()))
    return false;
  O = K = M = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < dims.front())
      O *= x.size(d);
    else if (d > dims.back())
      M *= x.size(d);
    else
      K *= x.size(d);
  }
  return M >= 16;
}

// x stored as S, reduced by r (which computes on compute_t<S>).
template <typename S, typename R>
void reduce_typed(const Tensor& x, Tensor& out, const DimList& dims, const R& r) {
  using Out = typename R::Out;
  with_out_buffer<Out>(out, [&](Out* o) {
    if constexpr (requires { r.step(r.init(), compute_t<S>()); }) {
      int64_t O = 0, K = 0, M = 0;
      if (middle_run(x, dims, O, K, M)) {
        reduce_cols(static_cast<const S*>(x.data_ptr()), O, K, M, r, o);
        return;
      }
    }
    Rows rows = make_rows(x, dims);
    reduce_rows(static_cast<const S*>(rows.t.data_ptr()), rows.outer, rows.K, r, o);
  });
}

// Dispatches on in's (widened) dtype; Make<T>() builds the reducer.
template <bool FloatingOnly, template <typename> class Make, typename... Args>
void reduce_kernel(const Tensor& in, Tensor& out, const DimList& dims, std::string_view op,
                   Args... args) {
  auto body = [&]<typename T>() { reduce_typed<T>(in, out, dims, Make<compute_t<T>>{args...}); };
  if constexpr (FloatingOnly)
    dispatch_floating(in.dtype(), op, body);
  else
    dispatch_all(in.dtype(), op, body);
}

template <typename T>
using MaxR = ExtremeR<T, true>;
template <typename T>
using MinR = ExtremeR<T, false>;

void sum_kernel(const Tensor& in, Tensor& out, const DimList& dims) {
  reduce_kernel<false, SumR>(in, out, dims, "sum");
}
void mean_kernel(const Tensor& in, Tensor& out, const DimList& dims) {
  reduce_kernel<true, MeanR>(in, out, dims, "mean");
}
void amax_kernel(const Tensor& in, Tensor& out, const DimList& dims) {
  reduce_kernel<false, MaxR>(in, out, dims, "amax");
}
void amin_kernel(const Tensor& in, Tensor& out, const DimList& dims) {
  reduce_kernel<false, MinR>(in, out, dims, "amin");
}
void logsumexp_kernel(const Tensor& in, Tensor& out, const DimList& dims) {
  reduce_kernel<true, LseR>(in, out, dims, "logsumexp");
}
void var_kernel(const Tensor& in, Tensor& out, const DimList& dims, double correction) {
  reduce_kernel<true, VarR>(in, out, dims, "var", correction);
}

// ---- max/min along one dim with the index of the first extreme (NaN counts as extreme).
template <typename T, bool IsMax>
struct ArgR {
  struct State {
    T v;
    int64_t i;
  };
  using Out = State;
  State partial(const T* p, int64_t n, int64_t offset) const {
    if (n == 0) return {T(), -1};
    State s{p[0], 0};
    for (int64_t i = 1; i < n; ++i)
      if (better<IsMax>(p[i], s.v)) s = {p[i], i};
    s.i += offset;
    return s;
  }
  State merge(State a, State b) const { return better<IsMax>(b.v, a.v) ? b : a; }
  Out finish(State s, int64_t) const { return s; }
};

template <bool IsMax>
void arg_kernel(const Tensor& in, Tensor& values, Tensor& indices, int64_t dim) {
  Rows rows = make_rows(in, in.dim() == 0 ? DimList{} : DimList{dim});
  dispatch_all(rows.t.dtype(), IsMax ? "max" : "min", [&]<typename T>() {
    {
      using R = ArgR<compute_t<T>, IsMax>;
      std::vector<typename R::Out> res(size_t(rows.outer));
      reduce_rows(static_cast<const T*>(rows.t.data_ptr()), rows.outer, rows.K, R{}, res.data());
      with_out_buffer<T>(values, [&](T* v) {  // exact: each value came from a T
        for (size_t o = 0; o < res.size(); ++o) v[o] = T(res[o].v);
      });
      with_out_buffer<int64_t>(indices, [&](int64_t* ix) {
        for (size_t o = 0; o < res.size(); ++o) ix[o] = res[o].i;
      });
    }
  });
}

}  // namespace

void register_reduce_kernels() {
  register_kernel<Op::sum>(DeviceType::cpu, sum_kernel);
  register_kernel<Op::mean>(DeviceType::cpu, mean_kernel);
  register_kernel<Op::amax>(DeviceType::cpu, amax_kernel);
  register_kernel<Op::amin>(DeviceType::cpu, amin_kernel);
  register_kernel<Op::logsumexp>(DeviceType::cpu, logsumexp_kernel);
  register_kernel<Op::var>(DeviceType::cpu, var_kernel);
  register_kernel<Op::max_dim>(DeviceType::cpu, arg_kernel<true>);
  register_kernel<Op::min_dim>(DeviceType::cpu, arg_kernel<false>);
}

}  // namespace minidl::cpu
