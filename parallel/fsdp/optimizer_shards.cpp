// Optimizers over FSDP's shards (see optimizer_shards.h): parameter names before wrapping, the
// units' flat parameters after; the scaler's all-reduced inf/NaN flag.
#include "parallel/fsdp/optimizer_shards.h"

#include <map>
#include <unordered_map>

#include "parallel/distributed.h"

namespace minidl::dist {

std::vector<std::vector<std::string>> optimizer_param_names(const optim::Optimizer& opt,
                                                            nn::Module& model) {
  std::unordered_map<const TensorImpl*, std::string> name_of;
  for (const auto& [name, t] : model.named_parameters())
    if (t.defined()) name_of.try_emplace(t.impl(), name);
  std::vector<std::vector<std::string>> names;
  for (size_t g = 0; g < opt.param_groups().size(); ++g) {
    names.emplace_back();
    for (const Tensor& p : opt.param_groups()[g].params) {
      auto it = name_of.find(p.impl());
      MINIDL_CHECK(it != name_of.end(), "FSDP: param group ", g, " of the optimizer holds a ",
                   shape_str(p.shape()),
                   " tensor that is not a parameter of the model being "
                   "wrapped; build the optimizer over model->parameters()");
      names.back().push_back(it->second);
    }
  }
  return names;
}

void shard_optimizer_params(optim::Optimizer& opt, const FullyShardedDataParallel& fsdp,
                            const std::vector<std::vector<std::string>>& names) {
  const auto& units = fsdp.units();
  // Every name of every original parameter (tied ones have several) -> its unit.
  std::map<std::string, size_t> unit_of;
  for (size_t u = 0; u < units.size(); ++u)
    for (const auto& p : units[u]->params())
      for (const auto& slot : p.slots) unit_of[slot.fqn] = u;
  auto unit_label = [&](size_t u) {
    return units[u]->unit_name().empty() ? std::string("<root>") : units[u]->unit_name();
  };
  std::vector<int> group_of(units.size(), -1);  // the group holding each unit
  std::vector<size_t> held(units.size(), 0);    // how many of its parameters the optimizer holds
  for (size_t g = 0; g < names.size(); ++g)
    for (const std::string& name : names[g]) {
      auto it = unit_of.find(name);
      MINIDL_CHECK(it != unit_of.end(), "FSDP: the optimizer's parameter '", name,
                   "' belongs to no FSDP unit");
      const size_t u = it->second;
      MINIDL_CHECK(group_of[u] < 0 || group_of[u] == int(g), "FSDP: unit '", unit_label(u),
                   "' has parameters in param groups ", group_of[u], " and ", g, " ('", name,
                   "'); a flat parameter is stepped with one group's options: split each unit "
                   "by group (FSDPOptions::flat_param_split) or wrap so that each group's "
                   "parameters form whole units");
      group_of[u] = int(g);
      ++held[u];
    }
  std::vector<std::vector<Tensor>> params(names.size());
  for (size_t u = 0; u < units.size(); ++u) {
    if (group_of[u] < 0) continue;  // the optimizer steps none of it
    const auto& ps = units[u]->params();
    if (held[u] != ps.size()) {
      std::string missing;
      for (const auto& p : ps) {
        bool in = false;
        for (const auto& slot : p.slots)
          for (const std::string& n : names[size_t(group_of[u])]) in = in || n == slot.fqn;
        if (!in) missing = p.slots.front().fqn + " " + shape_str(p.shape);
        if (!missing.empty()) break;
      }
      MINIDL_FAIL("FSDP: the optimizer holds ", held[u], " of the ", ps.size(),
                  " parameters of unit '", unit_label(u), "' (not '", missing,
                  "'); a flat parameter is stepped whole: give the optimizer all of them or none");
    }
    params[size_t(group_of[u])].push_back(units[u]->flat_param);
  }
  opt.replace_parameters(std::move(params));
}

amp::GradScaler sharded_grad_scaler(amp::GradScalerOptions options,
                                    std::shared_ptr<ProcessGroup> group) {
  if (!group) group = default_group_ptr();
  if (options.rank < 0) options.rank = group->rank();
  options.reduce_found_inf = [group](Tensor& found_inf) {
    if (group->size() > 1) group->allreduce(found_inf, ReduceOp::max)->wait();
  };
  return amp::GradScaler(std::move(options));
}

}  // namespace minidl::dist
