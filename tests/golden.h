// Golden data from PyTorch (tests/data/*.json, made by tools/golden/*.py): a cached loader and
// converters from {"data": [...], "shape": [...]} objects to tensors.
#pragma once
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <string>

#include "test_util.h"

namespace testutil {
using nlohmann::json;

// The parsed file MINIDL_TEST_DATA_DIR/<name>, loaded once.
inline const json& golden(const std::string& name) {
  static std::map<std::string, json> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  std::ifstream f(std::string(MINIDL_TEST_DATA_DIR) + "/" + name);
  REQUIRE_MESSAGE(f.good(), "missing golden file tests/data/", name);
  return cache.emplace(name, json::parse(f)).first->second;
}

inline std::vector<double> golden_values(const json& o) {
  return o["data"].get<std::vector<double>>();
}
inline Tensor golden_tensor(const json& o, DType dt) {
  return from_f64(golden_values(o), o["shape"].get<Shape>(), dt);
}

}  // namespace testutil
