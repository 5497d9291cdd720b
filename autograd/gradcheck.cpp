// gradcheck implementation: analytic gradient of <f(x), w> for a fixed random w via the
// engine, numeric gradient by central differences on each input element (f64).
#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace minidl::autograd {

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, double eps, double atol, double rtol) {
  std::vector<Tensor> checked;
  for (const Tensor& x : inputs)
    if (x.defined() && x.requires_grad()) {
      MINIDL_CHECK(x.dtype() == kFloat64, "gradcheck: inputs must be float64, got ", x.dtype());
      MINIDL_CHECK(x.is_leaf(), "gradcheck: inputs must be leaves");
      checked.push_back(x);
    }
  MINIDL_CHECK(!checked.empty(), "gradcheck: no input requires grad");
  Tensor out = f(inputs);
  Generator gen(1234);
  Tensor w = rand(out.shape(), kFloat64, out.device(), &gen);  // projection weights
  auto project = [&](const Tensor& y) { return sum(mul(y, w)).item<double>(); };
  std::vector<Tensor> analytic = grad({out}, checked, {w});  // J^T w = d<f(x), w>/dx

  GradcheckResult r;
  NoGradGuard no_grad;
  for (size_t k = 0; k < checked.size(); ++k) {
    Tensor x = checked[k];
    Tensor flat = x.contiguous().view({-1});
    MINIDL_CHECK(flat.shares_storage(x), "gradcheck: inputs must be contiguous");
    Tensor a =
        analytic[k].defined() ? analytic[k].contiguous().view({-1}) : zeros({x.numel()}, kFloat64);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double orig = flat.at({i});
      Tensor elem = flat.narrow(0, i, 1);
      elem.fill_(orig + eps);
      const double plus = project(f(inputs));
      elem.fill_(orig - eps);
      const double minus = project(f(inputs));
      elem.fill_(orig);
      const double numeric = (plus - minus) / (2 * eps);
      const double got = a.at({i});
      const double err = std::abs(got - numeric);
      r.max_abs_error = std::max(r.max_abs_error, err);
      if (r.ok && err > atol + rtol * std::abs(numeric)) {
        std::ostringstream os;
        os << "input " << k << " element " << i << ": analytic " << got << " vs numeric "
           << numeric;
        r.ok = false;
        r.message = os.str();
      }
    }
  }
  return r;
}

}  // namespace minidl::autograd
