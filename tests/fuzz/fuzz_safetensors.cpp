// Fuzz target of the safetensors reader: the in-memory reader and the lazy file reader must
// agree on every input (same tensors, or both throw), and a loaded file must round-trip.
#include <cstring>
#include <stdexcept>

#include "fuzz_targets.h"
#include "tensor/safetensors.h"
#include "tensor/error.h"

namespace minidl::fuzz {
namespace {

using TensorMap = std::map<std::string, Tensor>;

bool same(const TensorMap& a, const TensorMap& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    if (it == b.end()) return false;
    const Tensor& u = it->second;
    if (t.dtype() != u.dtype() || t.shape() != u.shape() || t.nbytes() != u.nbytes()) return false;
    if (t.nbytes() > 0 && std::memcmp(t.data_ptr(), u.data_ptr(), t.nbytes()) != 0) return false;
  }
  return true;
}

void invariant(bool ok, const char* what) {
  if (!ok) throw std::logic_error(std::string("fuzz_safetensors: ") + what);
}

}  // namespace

int fuzz_safetensors(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  TensorMap mem;
  SafetensorsMetadata meta;
  bool mem_ok = false;
  try {
    mem = load_safetensors_bytes(bytes, &meta, "<fuzz>");
    mem_ok = true;
  } catch (const Error&) {
  }

  const std::string path = write_scratch("fuzz.safetensors", data, size);
  bool file_ok = false;
  try {
    SafetensorsFile f(path);
    for (const std::string& name : f.names()) {
      const SafetensorsEntry& e = f.info(name);
      invariant(e.begin <= e.end && e.name == name, "inconsistent header entry");
    }
    TensorMap lazy = f.load_all();
    file_ok = true;
    invariant(!mem_ok || same(mem, lazy), "the file reader and the memory reader disagree");
    invariant(!mem_ok || f.metadata() == meta, "metadata differs between the readers");
    if (!f.names().empty()) {
      const std::string first = f.names().front();
      invariant(same({{first, f.get(first)}}, {{first, lazy.at(first)}}), "get() differs");
    }
  } catch (const Error&) {
  }
  invariant(mem_ok == file_ok, "one reader accepts what the other rejects");

  if (mem_ok) {  // what was read writes back and reads again unchanged
    SafetensorsMetadata meta2;
    TensorMap again = load_safetensors_bytes(save_safetensors_bytes(mem, meta), &meta2);
    invariant(same(mem, again) && meta2 == meta, "round trip changed the tensors");
  }
  return 0;
}

}  // namespace minidl::fuzz
