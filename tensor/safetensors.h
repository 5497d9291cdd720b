// safetensors I/O (Hugging Face format): 8-byte little-endian header size N, N bytes of JSON
// header {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the packed little-endian tensor data. Every malformed input throws minidl::Error.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace minidl {

using SafetensorsMetadata = std::map<std::string, std::string>;

// Writes `tensors` (any device, any layout; copied to CPU and made contiguous) to `path`
// crash-safely (write_file_atomic). Tensors are packed in name order; the header is padded
// with spaces to a multiple of 8 bytes, like the reference (Python/Rust) writer.
void save_safetensors(const std::map<std::string, Tensor>& tensors, const std::string& path,
                      const SafetensorsMetadata& metadata = {});

// Reads every tensor of a safetensors file onto the CPU. Fills `*metadata` (if given) with
// the "__metadata__" map. The whole file is validated before any tensor is returned.
std::map<std::string, Tensor> load_safetensors(const std::string& path,
                                               SafetensorsMetadata* metadata = nullptr);

// In-memory variants (the complete file contents as bytes). `source` names the buffer in
// error messages.
std::string save_safetensors_bytes(const std::map<std::string, Tensor>& tensors,
                                   const SafetensorsMetadata& metadata = {});
std::map<std::string, Tensor> load_safetensors_bytes(const std::string& bytes,
                                                     SafetensorsMetadata* metadata = nullptr,
                                                     const std::string& source = "<memory>");

// One tensor's header entry; offsets are relative to the start of the data buffer.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

// Lazy reader: the constructor reads and validates only the header (names, dtypes, shapes,
// offsets against the file size); tensors are read on demand.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  size_t size() const { return entries_.size(); }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const SafetensorsEntry& info(const std::string& name) const;  // throws for unknown names
  const SafetensorsMetadata& metadata() const { return metadata_; }

  Tensor get(const std::string& name) const;       // reads one tensor (CPU)
  std::map<std::string, Tensor> load_all() const;  // reads every tensor (CPU)

 private:
  std::map<std::string, Tensor> read(const std::vector<const SafetensorsEntry*>& which) const;

  std::string path_;
  uint64_t data_start_ = 0;  // 8 + N
  std::map<std::string, SafetensorsEntry> entries_;
  SafetensorsMetadata metadata_;
};

// The safetensors dtype string ("F32", "BF16", "BOOL", ...) of a minidl dtype.
const char* safetensors_dtype_name(DType dtype);

}  // namespace minidl
