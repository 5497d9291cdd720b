// Containers (nn/container.h): ModuleList typed access, ModuleListOf<T>, ModuleDict (key names,
// order, replacement, errors), and clone() keeping ties: tied parameters and shared submodules
// stay shared in the clone, typed member slots point at the cloned children, dedup'd
// parameters vs torch-like state_dict keys.
#include <doctest/doctest.h>

#include "nn/activation.h"
#include "nn/container.h"
#include "nn/embedding.h"
#include "nn/linear_conv.h"
#include "nn/transformer.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {
std::vector<std::string> param_names(const nn::Module& m) {
  std::vector<std::string> out;
  for (auto& [n, p] : m.named_parameters()) out.push_back(n);
  return out;
}

// A GPT-like toy whose output head shares the token embedding's weight.
struct TiedLM : nn::Cloneable<TiedLM> {
  std::shared_ptr<nn::Embedding> wte;
  std::shared_ptr<nn::ModuleListOf<nn::Linear>> h;
  std::shared_ptr<nn::Linear> lm_head;
  TiedLM() {
    wte = std::make_shared<nn::Embedding>(7, 4);
    h = std::make_shared<nn::ModuleListOf<nn::Linear>>();
    h->push_back(std::make_shared<nn::Linear>(4, 4));
    lm_head = std::make_shared<nn::Linear>(4, 7, false);
    lm_head->weight = wte->weight;
    register_module("wte", &wte);
    register_module("h", &h);
    register_module("lm_head", &lm_head);
  }
  Tensor forward(const Tensor& idx) override {
    Tensor x = (*wte)(idx);
    for (auto& l : *h) x = tanh((*l)(x));
    return (*lm_head)(x);
  }
};
}  // namespace

TEST_CASE("ModuleList: typed get, iteration, errors naming index and type") {
  nn::ModuleList list{std::make_shared<nn::Linear>(2, 3), std::make_shared<nn::ReLU>()};
  std::shared_ptr<nn::Linear> lin = list.get<nn::Linear>(0);
  REQUIRE(lin != nullptr);
  CHECK(lin->out_features == 3);
  CHECK(list.get<nn::ReLU>(-1) != nullptr);
  CHECK_THROWS_WITH_AS(list.get<nn::Linear>(1),
                       doctest::Contains("element 1 is a ReLU (ReLU), not a Linear"), Error);
  CHECK_THROWS_WITH_AS(list.get<nn::Linear>(2), doctest::Contains("index 2 is out of range"),
                       Error);
  int n = 0;
  for (std::shared_ptr<nn::Module> m : list) n += m != nullptr;
  CHECK(n == 2);
}

TEST_CASE("ModuleListOf<T>: typed elements, PyTorch names, typed clone") {
  manual_seed(1);
  nn::ModuleListOf<nn::TransformerBlock> h;
  for (int i = 0; i < 2; ++i) h.push_back(std::make_shared<nn::TransformerBlock>(4, 2));
  std::shared_ptr<nn::TransformerBlock> b = h[1];
  CHECK(b->attn->n_head == 2);
  CHECK(h[-1] == b);
  auto names = param_names(h);
  CHECK(names.size() == 24);
  CHECK(names[2] == "0.attn.c_attn.weight");
  CHECK(names[14] == "1.attn.c_attn.weight");
  CHECK(h.repr().rfind("ModuleList(\n  (0): TransformerBlock(", 0) == 0);
  int count = 0;
  Tensor x = random_tensor({1, 3, 4}, kFloat32, 2);
  nn::KVCache cache;
  for (auto& blk : h) {  // std::shared_ptr<TransformerBlock>: the two-argument forward
    x = blk->forward(x, {.cache = &cache});
    ++count;
    cache.reset();
  }
  CHECK(count == 2);
  auto c = std::dynamic_pointer_cast<nn::ModuleListOf<nn::TransformerBlock>>(h.clone());
  REQUIRE(c != nullptr);
  CHECK((*c)[0] != h[0]);
  CHECK((*c)[0]->attn->c_attn->weight.data_ptr() != h[0]->attn->c_attn->weight.data_ptr());
  // typed members of the cloned blocks point at the cloned children
  CHECK((*c)[0]->attn == (*c)[0]->named_children()[1].second);
  CHECK(bitwise_equal((*c)[1]->mlp->c_fc->weight, h[1]->mlp->c_fc->weight));
}

TEST_CASE("ModuleDict: key names, insertion order, replace, typed get, errors") {
  nn::ModuleDict d{{"wte", std::make_shared<nn::Embedding>(5, 2)},
                   {"proj", std::make_shared<nn::Linear>(2, 3)}};
  d.insert("act", std::make_shared<nn::ReLU>());
  CHECK(d.keys() == std::vector<std::string>{"wte", "proj", "act"});
  CHECK(d.contains("proj"));
  CHECK_FALSE(d.contains("nope"));
  CHECK(param_names(d) == std::vector<std::string>{"wte.weight", "proj.weight", "proj.bias"});
  auto sd = d.state_dict();
  CHECK(sd.count("proj.bias") == 1);
  CHECK(d.get<nn::Linear>("proj")->out_features == 3);
  CHECK_THROWS_WITH_AS(d.get<nn::Linear>("act"), doctest::Contains("'act' is a ReLU"), Error);
  CHECK_THROWS_WITH_AS(d["nope"], doctest::Contains("no key 'nope' (keys: 'wte', 'proj', 'act')"),
                       Error);
  CHECK_THROWS_WITH_AS(d.insert("a.b", std::make_shared<nn::ReLU>()),
                       doctest::Contains("invalid name 'a.b'"), Error);
  d.insert("proj", std::make_shared<nn::Linear>(2, 6));  // replaced in place
  CHECK(d.keys() == std::vector<std::string>{"wte", "proj", "act"});
  CHECK(d.get<nn::Linear>("proj")->out_features == 6);
  CHECK(d.size() == 3);
  auto items = d.items();
  CHECK(items[2].first == "act");
  auto c = std::dynamic_pointer_cast<nn::ModuleDict>(d.clone());
  REQUIRE(c != nullptr);
  CHECK(c->keys() == d.keys());
  CHECK(c->get<nn::Linear>("proj") != d.get<nn::Linear>("proj"));
}

TEST_CASE("clone: tied parameters stay tied, named once, state_dict keeps both keys") {
  manual_seed(2);
  auto m = std::make_shared<TiedLM>();
  CHECK(param_names(*m) ==
        std::vector<std::string>{"wte.weight", "h.0.weight", "h.0.bias"});  // lm_head.weight dup
  auto sd = m->state_dict();
  CHECK(sd.count("lm_head.weight") == 1);  // torch keeps tied keys in state_dict
  CHECK(sd.count("wte.weight") == 1);
  auto c = std::dynamic_pointer_cast<TiedLM>(m->clone());
  REQUIRE(c != nullptr);
  CHECK(c->wte != m->wte);
  CHECK(c->wte->weight.is_same(c->lm_head->weight));
  CHECK_FALSE(c->wte->weight.is_same(m->wte->weight));
  CHECK(c->wte->weight.requires_grad());
  CHECK(c->parameters().size() == 3);
  CHECK(bitwise_equal(c->lm_head->weight, m->lm_head->weight));
  {  // modify one place, the other sees it; the original is untouched
    NoGradGuard ng;
    c->wte->weight.fill_(0.25);
  }
  CHECK(c->lm_head->weight.tolist<double>()[5] == 0.25);
  CHECK(m->lm_head->weight.tolist<double>()[5] != 0.25);
  // load_state_dict with both keys still works (and writes the shared tensor)
  auto r = c->load_state_dict(sd);
  CHECK(r.missing_keys.empty());
  CHECK(bitwise_equal(c->lm_head->weight, m->wte->weight));
  // gradients of both uses accumulate into the one tensor
  Tensor idx = from_f64({1, 3, 6}, {3}, kInt64);
  sum(c->forward(idx)).backward();
  CHECK(c->wte->weight.grad().defined());
  CHECK(c->lm_head->weight.grad().is_same(c->wte->weight.grad()));
}

TEST_CASE("clone: a submodule shared by two parents is cloned once") {
  auto shared = std::make_shared<nn::Linear>(2, 2);
  nn::ModuleDict d{{"a", shared}, {"b", shared}};
  CHECK(d.parameters().size() == 2);
  auto c = std::dynamic_pointer_cast<nn::ModuleDict>(d.clone());
  REQUIRE(c != nullptr);
  CHECK(c->get<nn::Linear>("a") == c->get<nn::Linear>("b"));
  CHECK(c->get<nn::Linear>("a") != shared);
  CHECK(c->parameters().size() == 2);
}
