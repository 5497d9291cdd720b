// Tensor printing in PyTorch's format (torch 1.13 torch/_tensor_str.py with default print
// options: precision 4, threshold 1000, edgeitems 3, linewidth 80), e.g.
//   tensor([[ 1.5000, -2.0000],
//           [ 3.0000,  4.0000]], dtype=torch.float64)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace minidl {
namespace {

constexpr int kPrecision = 4;
constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr int64_t kLineWidth = 80;

// printf into a std::string (Python's "{:.Nf}" / "{:.Ne}" agree with printf for finite values).
std::string printf_str(const char* fmt, int width, int precision, double v) {
  int len = std::snprintf(nullptr, 0, fmt, width, precision, v);
  std::string s(size_t(len) + 1, '\0');
  std::snprintf(s.data(), s.size(), fmt, width, precision, v);
  s.resize(size_t(len));
  return s;
}

// Python's str() of a non-finite float.
std::string nonfinite_str(double v) {
  if (std::isnan(v)) return "nan";
  return v < 0 ? "-inf" : "inf";
}

std::string pad_left(const std::string& s, int width) {
  return int(s.size()) >= width ? s : std::string(size_t(width) - s.size(), ' ') + s;
}

// The printed elements in print order, as double (floating dtypes) or int64 (others).
struct Elements {
  DType dtype;
  bool floating;
  std::vector<double> f;
  std::vector<int64_t> i;
};

// torch's _Formatter: picks int/fixed/scientific mode and the common element width from the
// values that will be printed (all, or the summarised edges); format(k) renders element k.
class Formatter {
 public:
  explicit Formatter(const Elements& e) : e_(e) {
    if (!e.floating) {
      for (int64_t v : e.i) max_width_ = std::max(max_width_, int(int_str(v).size()));
      return;
    }
    std::vector<double> vals;
    for (double v : e.f)
      if (std::isfinite(v) && v != 0.0) vals.push_back(v);
    if (vals.empty()) return;
    double amin = std::abs(vals[0]), amax = amin;
    for (double v : vals) {
      amin = std::min(amin, std::abs(v));
      amax = std::max(amax, std::abs(v));
      if (v != std::ceil(v)) int_mode_ = false;
    }
    bool sci = amax / amin > 1000.0 || amax > 1.0e8 || (!int_mode_ && amin < 1.0e-4);
    if (sci) {
      sci_mode_ = true;
      for (double v : vals)
        max_width_ = std::max(max_width_, int(printf_str("%*.*e", 0, kPrecision, v).size()));
    } else if (int_mode_) {
      for (double v : vals)
        max_width_ = std::max(max_width_, int(printf_str("%*.*f", 0, 0, v).size()) + 1);
    } else {
      for (double v : vals)
        max_width_ = std::max(max_width_, int(printf_str("%*.*f", 0, kPrecision, v).size()));
    }
  }

  int width() const { return max_width_; }

  std::string format(int64_t k) const {
    std::string r;
    if (!e_.floating) {
      r = int_str(e_.i[size_t(k)]);
    } else {
      double v = e_.f[size_t(k)];
      if (!std::isfinite(v))
        r = nonfinite_str(v);
      else if (sci_mode_)
        r = printf_str("%*.*e", max_width_, kPrecision, v);
      else if (int_mode_)
        r = printf_str("%*.*f", 0, 0, v) + ".";
      else
        r = printf_str("%*.*f", 0, kPrecision, v);
    }
    return pad_left(r, max_width_);
  }

 private:
  std::string int_str(int64_t v) const {
    if (e_.dtype == DType::boolean) return v ? "True" : "False";
    return std::to_string(v);
  }

  const Elements& e_;
  bool int_mode_ = true;
  bool sci_mode_ = false;
  int max_width_ = 1;
};

// Walks the (summarised) tensor: the element offsets that get printed, in order.
struct Walker {
  const Shape& shape;
  const Strides& strides;
  bool summarize;

  // Indices of dim d to show; -1 marks the "..." gap.
  std::vector<int64_t> shown(size_t d) const {
    std::vector<int64_t> r;
    int64_t n = shape[d];
    if (summarize && n > 2 * kEdgeItems) {
      for (int64_t i = 0; i < kEdgeItems; ++i) r.push_back(i);
      r.push_back(-1);
      for (int64_t i = n - kEdgeItems; i < n; ++i) r.push_back(i);
    } else {
      for (int64_t i = 0; i < n; ++i) r.push_back(i);
    }
    return r;
  }

  void collect(size_t d, int64_t base, std::vector<int64_t>& out) const {
    if (d == shape.size()) {
      out.push_back(base);
      return;
    }
    for (int64_t i : shown(d))
      if (i >= 0) collect(d + 1, base + i * strides[d], out);
  }

  // _tensor_str_with_formatter for the sub-tensor at dim d; `pos` counts the printed elements
  // (render visits them in collect's order).
  std::string render(size_t d, int64_t& pos, int64_t indent, const Formatter& fmt) const {
    const size_t nd = shape.size();
    if (d == nd) return fmt.format(pos++);
    std::vector<int64_t> idx = shown(d);
    std::vector<std::string> items;
    if (d + 1 == nd) {  // _vector_str
      int64_t element_length = fmt.width() + 2;
      int64_t per_line = std::max<int64_t>(1, (kLineWidth - indent) / element_length);
      for (int64_t i : idx) items.push_back(i < 0 ? " ..." : fmt.format(pos++));
      std::string s = "[";
      for (size_t k = 0; k < items.size(); ++k) {
        if (k > 0) {
          if (int64_t(k) % per_line == 0)
            s.append(",\n").append(size_t(indent + 1), ' ');
          else
            s += ", ";
        }
        s += items[k];
      }
      return s + "]";
    }
    for (int64_t i : idx) items.push_back(i < 0 ? "..." : render(d + 1, pos, indent + 1, fmt));
    std::string sep(1, ',');
    sep.append(nd - d - 1, '\n').append(size_t(indent + 1), ' ');
    std::string s = "[";
    for (size_t k = 0; k < items.size(); ++k) {
      if (k > 0) s += sep;
      s += items[k];
    }
    return s + "]";
  }
};

// Python's str(tuple(shape)).
std::string shape_tuple(const Shape& s) {
  std::string r = "(";
  for (size_t k = 0; k < s.size(); ++k) r += (k ? ", " : "") + std::to_string(s[k]);
  return r + (s.size() == 1 ? ",)" : ")");
}

// _add_suffixes
std::string add_suffixes(const std::string& tensor_str, const std::vector<std::string>& suffixes,
                         int64_t indent) {
  std::string r = tensor_str;
  size_t nl = tensor_str.rfind('\n');
  // Python: len(s) - s.rfind("\n") + 1, where rfind gives -1 when absent.
  int64_t last_line_len =
      int64_t(tensor_str.size()) - (nl == std::string::npos ? -1 : int64_t(nl)) + 1;
  for (const std::string& suffix : suffixes) {
    int64_t len = int64_t(suffix.size());
    if (last_line_len + len + 2 > kLineWidth) {
      r.append(",\n").append(size_t(indent), ' ').append(suffix);
      last_line_len = indent + len;
    } else {
      r.append(", ").append(suffix);
      last_line_len += len + 2;
    }
  }
  return r + ")";
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  const std::string prefix = "tensor(";
  const int64_t indent = int64_t(prefix.size());
  std::vector<std::string> suffixes;
  if (is_cuda()) suffixes.push_back(std::string("device='").append(device().str()).append("'"));
  std::string body;
  if (numel() == 0) {
    if (dim() != 1) suffixes.push_back(std::string("size=").append(shape_tuple(shape())));
    if (dtype() != DType::f32)
      suffixes.push_back(std::string("dtype=torch.").append(dtype_name(dtype())));
    body = "[]";
  } else {
    DType dt = dtype();
    if (dt != DType::f32 && dt != DType::i64 && dt != DType::boolean)
      suffixes.push_back(std::string("dtype=torch.").append(dtype_name(dt)));
    Tensor c = is_cpu() ? *this : native::to(*this, kCPU);  // raw: printing records nothing
    Walker w{c.shape(), c.strides(), numel() > kThreshold};
    std::vector<int64_t> offsets;
    w.collect(0, 0, offsets);
    Elements e{dt, is_floating(dt), {}, {}};
    dispatch_all(dt, "print", [&]<typename T>() {
      const T* p = static_cast<const T*>(c.data_ptr());
      for (int64_t off : offsets) {
        if constexpr (is_float_v<T>)
          e.f.push_back(double(static_cast<opmath_t<T>>(p[off])));
        else
          e.i.push_back(int64_t(p[off]));
      }
    });
    Formatter fmt(e);
    int64_t pos = 0;
    body = w.render(0, pos, indent, fmt);
  }
  return add_suffixes(prefix + body, suffixes, indent);
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  return os << t.str();
}

}  // namespace minidl
