// Random frontends (torch.rand/randn/randint/bernoulli/randperm/multinomial, uniform_/normal_,
// dropout masks); the default generator is in tensor/random.cpp. Validation here, the numbers come
// from the device's random kernels (Philox stream contract in tensor/random.h). No history: raw ops
// only.
#include <cmath>
#include <limits>
#include <numeric>

#include "tensor/ops.h"

namespace minidl {

namespace {

Generator& gen_or_default(Generator* gen) {
  return gen ? *gen : default_generator();
}

void check_floating(DType dtype, std::string_view op) {
  MINIDL_CHECK(is_floating(dtype), "op `", op, "` needs a floating dtype, got ", dtype);
}

// Runs a random kernel on `t`: directly when contiguous, else through a contiguous buffer.
template <Op op>
Tensor& fill_random(Tensor& t, double a, double b, Generator* gen) {
  if (t.numel() == 0) return t;
  if (t.is_contiguous()) {
    kernel<op>(t.device())(t, a, b, gen_or_default(gen));
    t.storage()->bump_version();
  } else {
    Tensor tmp = empty(t.shape(), t.dtype(), t.device());
    kernel<op>(t.device())(tmp, a, b, gen_or_default(gen));
    native::copy_(t, tmp);
  }
  return t;
}

// Largest/smallest value representable in an integral dtype (bool: [0, 1]).
std::pair<double, double> int_bounds(DType dt) {
  switch (dt) {
    case DType::i32:
      return {double(std::numeric_limits<int32_t>::min()),
              double(std::numeric_limits<int32_t>::max())};
    case DType::u8:
      return {0.0, 255.0};
    case DType::boolean:
      return {0.0, 1.0};
    default:
      return {double(std::numeric_limits<int64_t>::min()),
              double(std::numeric_limits<int64_t>::max())};
  }
}

}  // namespace

Tensor rand(const Shape& shape, DType dtype, Device device, Generator* gen) {
  check_floating(dtype, "rand");
  Tensor out = empty(shape, dtype, device);
  return fill_random<Op::uniform>(out, 0.0, 1.0, gen);
}

Tensor randn(const Shape& shape, DType dtype, Device device, Generator* gen) {
  check_floating(dtype, "randn");
  Tensor out = empty(shape, dtype, device);
  return fill_random<Op::normal>(out, 0.0, 1.0, gen);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype, Device device,
               Generator* gen) {
  MINIDL_CHECK(low < high, "op `randint`: expected low < high, got low=", low, " >= high=", high);
  constexpr int64_t kExact = int64_t(1) << 53;  // bounds travel to the kernel as doubles
  MINIDL_CHECK(low >= -kExact && high <= kExact,
               "op `randint`: bounds must be within +-2^53, got low=", low, " high=", high);
  if (!is_floating(dtype)) {
    auto [lo, hi] = int_bounds(dtype);
    MINIDL_CHECK(double(low) >= lo && double(high - 1) <= hi, "op `randint`: range [", low, ", ",
                 high, ") is out of bounds for dtype ", dtype);
  }
  Tensor out = empty(shape, dtype, device);
  return fill_random<Op::randint>(out, double(low), double(high), gen);
}

Tensor bernoulli(const Shape& shape, double p, DType dtype, Device device, Generator* gen) {
  MINIDL_CHECK(p >= 0.0 && p <= 1.0, "op `bernoulli`: expected p in [0, 1], got p=", p);
  Tensor out = empty(shape, dtype, device);
  return fill_random<Op::bernoulli>(out, p, 1.0, gen);
}

Tensor& uniform_(Tensor& t, double low, double high, Generator* gen) {
  MINIDL_CHECK(t.defined(), "op `uniform_`: undefined tensor");
  check_floating(t.dtype(), "uniform_");
  MINIDL_CHECK(low <= high, "op `uniform_`: expected a [low, high) range, but found low=", low,
               " > high=", high);
  MINIDL_CHECK(std::isfinite(low) && std::isfinite(high - low),
               "op `uniform_`: bounds must be finite, got low=", low, " high=", high);
  return fill_random<Op::uniform>(t, low, high, gen);
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  MINIDL_CHECK(t.defined(), "op `normal_`: undefined tensor");
  check_floating(t.dtype(), "normal_");
  MINIDL_CHECK(std >= 0.0, "op `normal_`: expected std >= 0.0, but found std ", std);
  return fill_random<Op::normal>(t, mean, std, gen);
}

// Sequential Fisher-Yates on the CPU (inherently serial); counters as documented in random.h.
Tensor randperm(int64_t n, Generator* gen) {
  MINIDL_CHECK(n >= 0, "op `randperm`: expected n >= 0, got n=", n);
  Tensor out = empty({n}, kInt64, kCPU);
  int64_t* p = out.data_ptr<int64_t>();
  std::iota(p, p + n, int64_t(0));
  if (n < 2) return out;
  PhiloxStream s = gen_or_default(gen).reserve(PhiloxStream::blocks64(uint64_t(n)));
  for (int64_t j = n - 1; j >= 1; --j) {
    uint64_t k = s.word64(uint64_t(j)) % uint64_t(j + 1);
    std::swap(p[j], p[k]);
  }
  return out;
}

// Indices drawn from rows of non-negative weights: validated here (weights checked on their
// device with raw ops), drawn by the multinomial kernel from a float64 scratch copy.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator* gen) {
  MINIDL_CHECK(probs.defined(), "op `multinomial`: undefined input tensor");
  MINIDL_CHECK(probs.dim() == 1 || probs.dim() == 2, "op `multinomial`: prob_dist must be 1 or ",
               "2 dim, got shape ", probs.shape_str());
  MINIDL_CHECK(probs.is_floating_point(), "op `multinomial`: only supports floating-point dtypes ",
               "for input, got ", probs.dtype());
  MINIDL_CHECK(num_samples > 0, "op `multinomial`: cannot sample n_sample <= 0 samples (got ",
               num_samples, ")");
  const int64_t C = probs.size(-1), B = probs.dim() == 2 ? probs.size(0) : 1;
  MINIDL_CHECK(C > 0, "op `multinomial`: no categories (shape ", probs.shape_str(), ")");
  MINIDL_CHECK(replacement || num_samples <= C, "op `multinomial`: cannot sample n_sample > ",
               "prob_dist.size(-1) samples without replacement (n_sample ", num_samples,
               ", categories ", C, ")");
  Tensor w = empty({B, C}, kFloat64, probs.device());
  native::copy_(w, native::reshape(probs, {B, C}));  // the kernel's scratch copy
  if (B > 0) {
    constexpr double inf = std::numeric_limits<double>::infinity();
    Tensor bad = native::logical_or(native::logical_or(native::lt(w, 0.0), native::ne(w, w)),
                                    native::eq(w, inf));
    Tensor positive = native::sum(native::gt(w, 0.0), {1});  // [B] int64
    std::vector<int64_t> stats = native::stack({native::sum(bad), native::amin(positive),
                                                native::sum(native::eq(native::sum(w, {1}), 0.0))})
                                     .tolist<int64_t>();
    MINIDL_CHECK(stats[0] == 0, "op `multinomial`: probability tensor contains either `inf`, ",
                 "`nan` or element < 0 (shape ", probs.shape_str(), ")");
    MINIDL_CHECK(stats[2] == 0, "op `multinomial`: invalid multinomial distribution (sum of ",
                 "probabilities <= 0) (shape ", probs.shape_str(), ")");
    MINIDL_CHECK(replacement || stats[1] >= num_samples, "op `multinomial`: invalid multinomial ",
                 "distribution (with replacement=False, not enough non-negative category to ",
                 "sample): ", num_samples, " samples but a row has ", stats[1],
                 " positive weights");
  }
  Tensor out = empty({B, num_samples}, kInt64, probs.device());
  kernel<Op::multinomial>(probs.device())(w, out, replacement, gen_or_default(gen));
  return probs.dim() == 1 ? native::view(out, {num_samples}) : out;
}

Tensor dropout_mask(const Shape& shape, double p, DType dtype, Device device, Generator* gen) {
  MINIDL_CHECK(p >= 0.0 && p <= 1.0,
               "op `dropout_mask`: dropout probability has to be between 0 and 1, but got ", p);
  check_floating(dtype, "dropout_mask");
  Tensor out = empty(shape, dtype, device);
  if (p == 0.0) return native::fill_(out, 1);
  if (p == 1.0) return native::fill_(out, 0);
  return fill_random<Op::bernoulli>(out, 1.0 - p, 1.0 / (1.0 - p), gen);
}

}  // namespace minidl
