// safetensors writer: the header JSON (dtype names, shapes, data offsets, optional metadata;
// padded to 8 bytes) then each tensor's bytes, to a file (atomically) or to memory.
#include <bit>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "tensor/atomic_file.h"
#include "tensor/ops.h"
#include "tensor/safetensors.h"

namespace minidl {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a LE host");

// The header JSON (padded to a multiple of 8 bytes) of a set of tensors.
std::string make_header(const std::map<std::string, Tensor>& tensors,
                        const SafetensorsMetadata& metadata, const std::string& dst) {
  using ojson = nlohmann::ordered_json;
  ojson h = ojson::object();
  if (!metadata.empty()) {
    ojson m = ojson::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    MINIDL_CHECK(name != "__metadata__", "safetensors: cannot save '", dst,
                 "': '__metadata__' is reserved and cannot name a tensor");
    MINIDL_CHECK(t.defined(), "safetensors: cannot save '", dst, "': tensor '", name,
                 "' is undefined");
    ojson shape = ojson::array();
    for (int64_t d : t.shape()) shape.push_back(d);
    ojson e = ojson::object();
    e["dtype"] = safetensors_dtype_name(t.dtype());
    e["shape"] = std::move(shape);
    e["data_offsets"] = ojson::array({offset, offset + t.nbytes()});
    offset += t.nbytes();
    h[name] = std::move(e);
  }
  std::string text;
  try {
    text = h.dump();
  } catch (const nlohmann::json::exception& e) {
    MINIDL_FAIL("safetensors: cannot save '", dst,
                "': tensor names and metadata must be valid UTF-8: ", e.what());
  }
  text.resize((text.size() + 7) / 8 * 8, ' ');
  return text;
}

void write_image(const std::map<std::string, Tensor>& tensors, const SafetensorsMetadata& metadata,
                 const std::string& dst, const ByteSink& sink) {
  const std::string header = make_header(tensors, metadata, dst);
  const uint64_t n = header.size();
  char len[8];
  std::memcpy(len, &n, 8);
  sink(len, 8);
  sink(header.data(), header.size());
  for (const auto& [name, t] : tensors) {
    Tensor c = native::contiguous(native::to(t, kCPU));  // one tensor at a time on the host
    if (c.nbytes() > 0) sink(c.data_ptr(), c.nbytes());
  }
}

}  // namespace

void save_safetensors(const std::map<std::string, Tensor>& tensors, const std::string& path,
                      const SafetensorsMetadata& metadata) {
  make_header(tensors, metadata, path);  // validate before creating any file
  write_file_atomic(path,
                    [&](const ByteSink& sink) { write_image(tensors, metadata, path, sink); });
}

std::string save_safetensors_bytes(const std::map<std::string, Tensor>& tensors,
                                   const SafetensorsMetadata& metadata) {
  std::string out;
  write_image(tensors, metadata, "<memory>", [&](const void* data, size_t size) {
    out.append(static_cast<const char*>(data), size);
  });
  return out;
}

}  // namespace minidl
