// CPU-vs-CUDA parity harness for the cuda_ops suites: a table of cases (op frontends applied to
// seeded random inputs of several shapes, dtypes and memory layouts), each run on both devices
// and compared with per-dtype tolerances (exact for integer/bool outputs and exact cases). The
// inputs the CPU rejects are listed per case (Reject); any other CPU error fails.
#pragma once
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "test_util.h"

namespace parity {
using namespace minidl;
using testutil::random_tensor;

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>& in, Device dev, int v)>;

// Inputs the CPU rejects by design (as PyTorch does): a CPU throw for one of `dtypes` (empty:
// any) in one of `variants` (empty: any) whose message contains `error`. run() counts these
// instead of comparing; any other CPU throw fails, and so does an entry that never matched.
struct Reject {
  std::vector<DType> dtypes;
  std::vector<int> variants;
  std::string error;
};

struct Case {
  std::string name;
  std::vector<std::string> ops;            // op_list.def names this case runs (coverage)
  std::vector<std::vector<Shape>> shapes;  // input shape sets (one Shape per input)
  std::vector<DType> dtypes;               // dtype of the inputs (CPU rejections: `rejects`)
  Fn fn;                                   // variant v of the computation on `dev`
  int variants = 1;                        // fn returns {} for a variant that does not apply
  double lo = -2, hi = 2;                  // input values (u8 inputs clamp lo to 0)
  bool layouts = true;                     // also run transposed/sliced/expanded inputs
  bool exact = false;                      // bitwise equality for every output
  double tol_scale = 1;
  std::vector<Reject> rejects = {};  // the combinations the CPU must reject (see Reject)
};

inline const std::vector<DType> kAll = {kFloat32, kFloat64, kFloat16, kBFloat16,
                                        kInt32,   kInt64,   kUInt8,   kBool};
inline const std::vector<DType> kFloats = {kFloat32, kFloat64, kFloat16, kBFloat16};
inline const std::vector<DType> kNonFloat = {kInt32, kInt64, kUInt8, kBool};

// Relative tolerance per output dtype (0: exact).
inline double rel_tol(DType dt) {
  switch (dt) {
    case DType::f64:
      return 1e-12;
    case DType::f32:
      return 1e-5;
    case DType::f16:
      return 1e-2;
    case DType::bf16:
      return 3e-2;
    default:
      return 0;
  }
}

// A deterministic random tensor made on the CPU and moved to `dev` (same values on both).
inline Tensor rnd(const Shape& s, DType dt, uint64_t seed, Device dev, double lo = -2,
                  double hi = 2) {
  if (dt == kUInt8) lo = std::max(lo, 0.0);
  return random_tensor(s, dt, seed, lo, hi).to(dev);
}
// int64 indices in [0, n).
inline Tensor idx(const Shape& s, int64_t n, uint64_t seed, Device dev) {
  return random_tensor(s, kInt64, seed, 0, double(n)).to(dev);
}

// Layout 0: as is; 1: sliced (every other element); 2: transposed storage of the last two
// dims; 3: expanded from the first row along dim 0 (stride 0). Same values on every device for
// the same input; returns the input unchanged when the layout does not apply.
inline Tensor apply_layout(const Tensor& t, int layout) {
  if (t.numel() == 0 || t.dim() == 0) return t;
  switch (layout) {
    case 1:
      return testutil::noncontiguous(t);
    case 2:
      return t.dim() >= 2 ? t.transpose(-1, -2).contiguous().transpose(-1, -2) : t;
    case 3:
      return t.size(0) > 1 ? t.narrow(0, 0, 1).expand(t.shape()) : t;
    default:
      return t;
  }
}
inline const char* layout_name(int layout) {
  static const char* names[] = {"contiguous", "sliced", "transposed", "expanded"};
  return names[layout];
}

// Compares outputs on `dev` (CUDA) with CPU outputs: device, shape, dtype, then values.
inline void compare(const std::vector<Tensor>& got, const std::vector<Tensor>& want, bool exact,
                    double tol_scale, Device dev = kCUDA) {
  CHECK(got.size() == want.size());
  for (size_t k = 0; k < std::min(got.size(), want.size()); ++k) {
    CAPTURE(k);
    if (!want[k].defined()) {
      CHECK_FALSE(got[k].defined());
      continue;
    }
    // CHECK (not REQUIRE) so one bad output does not stop the remaining cases
    CHECK(got[k].defined());
    if (!got[k].defined()) continue;
    CHECK(got[k].device() == dev);
    CHECK(got[k].shape() == want[k].shape());
    CHECK(got[k].dtype() == want[k].dtype());
    if (got[k].shape() != want[k].shape() || got[k].dtype() != want[k].dtype()) continue;
    std::vector<double> w = testutil::to_f64(want[k]);
    double scale = 1;
    for (double x : w)
      if (std::isfinite(x)) scale = std::max(scale, std::abs(x));
    const double rtol = exact ? 0 : rel_tol(want[k].dtype()) * tol_scale;
    testutil::check_close(got[k].cpu(), w, rtol, rtol * scale);
  }
}

// What run() did with a case's combinations.
struct Counts {
  int compared = 0;  // run on both devices and compared
  int rejected = 0;  // rejected by the CPU as the case's `rejects` list (not run on `dev`)
};

// Index of the entry of c.rejects that explains a CPU error, or -1.
inline int find_reject(const Case& c, DType dt, int v, const std::string& what) {
  for (size_t r = 0; r < c.rejects.size(); ++r) {
    const Reject& rj = c.rejects[r];
    if ((rj.dtypes.empty() || std::count(rj.dtypes.begin(), rj.dtypes.end(), dt)) &&
        (rj.variants.empty() || std::count(rj.variants.begin(), rj.variants.end(), v)) &&
        what.find(rj.error) != std::string::npos)
      return int(r);
  }
  return -1;
}

// Runs every (shape set, dtype, layout, variant) of a case on the CPU and on `dev` (dev = CPU
// checks the tables themselves on machines without a GPU). A CPU error must be one of the
// case's rejects, and every reject must occur.
inline Counts run(const Case& c, Device dev = kCUDA) {
  Counts n;
  std::vector<int> reject_hits(c.rejects.size(), 0);
  for (size_t si = 0; si < c.shapes.size(); ++si) {
    const std::vector<Shape>& shapes = c.shapes[si];
    for (DType dt : c.dtypes) {
      for (int layout = 0; layout < (c.layouts ? 4 : 1); ++layout) {
        std::vector<Tensor> cpu_in, gpu_in;
        bool changed = layout == 0;
        for (size_t i = 0; i < shapes.size(); ++i) {
          Tensor base = rnd(shapes[i], dt, 1000 * si + 17 * i + 1, kCPU, c.lo, c.hi);
          cpu_in.push_back(apply_layout(base, layout));
          gpu_in.push_back(apply_layout(base.to(dev), layout));
          changed = changed || !cpu_in.back().is_same(base);
        }
        if (!changed) continue;  // same as the contiguous run
        for (int v = 0; v < c.variants; ++v) {
          INFO(c.name, " variant ", v, " dtype ", dtype_name(dt), " layout ", layout_name(layout),
               " shape set ", si, " first shape ", shape_str(shapes.empty() ? Shape{} : shapes[0]));
          std::vector<Tensor> want, got;
          try {
            want = c.fn(cpu_in, kCPU, v);
          } catch (const std::exception& e) {
            const int r = find_reject(c, dt, v, e.what());
            if (r < 0) {
              FAIL_CHECK("the CPU threw, and the case does not list it as rejected: ",
                         std::string(e.what()));
            } else {
              ++reject_hits[size_t(r)];
              ++n.rejected;
            }
            continue;
          }
          if (want.empty()) continue;
          try {
            got = c.fn(gpu_in, dev, v);
          } catch (const std::exception& e) {
            FAIL_CHECK(dev, " threw where the CPU did not: ", std::string(e.what()));
            continue;
          }
          compare(got, want, c.exact, c.tol_scale, dev);
          ++n.compared;
        }
      }
    }
  }
  for (size_t r = 0; r < c.rejects.size(); ++r)
    CHECK_MESSAGE(reject_hits[r] > 0, "case ", c.name, ": reject ", r, " ('", c.rejects[r].error,
                  "') never occurred: the CPU accepts it now, or the entry is wrong");
  return n;
}

// Runs a list of cases, each of which must compare at least once; prints how many
// combinations were compared and how many the CPU rejected as listed.
inline void run_all(const std::vector<Case>& cases, Device dev = kCUDA) {
  Counts total;
  int cases_rejecting = 0;
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const Counts n = run(c, dev);
    CHECK_MESSAGE(n.compared > 0, "case ", c.name, " compared nothing");
    total.compared += n.compared;
    total.rejected += n.rejected;
    cases_rejecting += n.rejected > 0;
  }
  std::printf(
      "[parity] %zu cases on %s: %d combinations compared, %d rejected by the CPU as "
      "listed (in %d cases)\n",
      cases.size(), dev.str().c_str(), total.compared, total.rejected, cases_rejecting);
  std::fflush(stdout);
}

// The case tables (test_cuda_ops.cpp: copy/unary/binary/reduce/softmax/linalg;
// test_cuda_ops2.cpp: conv/pool/norm/loss/index/random; test_cuda_amp_scaler.cpp: AMP).
std::vector<Case> cases_elementwise();
std::vector<Case> cases_reduce_linalg();
std::vector<Case> cases_nn();
std::vector<Case> cases_index_random();
std::vector<Case> cases_amp();  // test_cuda_amp_scaler.cpp: AMP and fused-optimizer ops
std::vector<Case> cases_gpt();  // test_cuda_gpt_ops.cpp: tril/triu, cumsum, multinomial, ...

}  // namespace parity
