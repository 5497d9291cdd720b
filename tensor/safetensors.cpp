// safetensors reader (the writer: safetensors_write.cpp). The header is validated like the
// reference implementation (huggingface/safetensors): size limits, JSON shape, dtypes, shapes,
// offsets and a data buffer covered exactly (sorted by offset, no overlap, no hole, no trailing
// bytes).
#include "tensor/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "tensor/ops.h"

namespace minidl {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a LE host");

using json = nlohmann::json;
constexpr uint64_t kMaxHeaderSize = 100'000'000;  // the reference implementation's limit
constexpr int kMaxNesting = 3;                    // {tensor: {shape: [...]}}

struct DTypeName {
  const char* name;
  DType dtype;
};
constexpr DTypeName kDTypes[] = {
#define MINIDL_DTYPE(name, T, size, torch_name, short_name, scalar_type, safetensors) \
  {safetensors, DType::name},
#include "tensor/dtypes.def"
#undef MINIDL_DTYPE
};
// Valid in the format, but minidl has no such dtype.
constexpr const char* kUnsupportedDTypes[] = {"I8",      "I16",     "U16",     "U32",
                                              "U64",     "F8_E5M2", "F8_E4M3", "F8_E8M0",
                                              "F6_E2M3", "F6_E3M2", "F4",      "C64"};

struct Header {
  std::map<std::string, SafetensorsEntry> entries;
  SafetensorsMetadata metadata;
};

std::string prefix(const std::string& src) {
  return "safetensors: '" + src + "': ";
}

uint64_t read_le64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Checks the header size field N against the total size of the file/buffer.
void check_header_size(uint64_t n, uint64_t total, const std::string& src) {
  MINIDL_CHECK(n <= kMaxHeaderSize, prefix(src), "header size ", n, " exceeds the limit of ",
               kMaxHeaderSize, " bytes (corrupt file?)");
  MINIDL_CHECK(n <= total - 8, prefix(src), "header size ", n, " exceeds the ", total - 8,
               " bytes after the size field (truncated file?)");
}

// Rejects what the JSON parser would get wrong or build at length before parsing: NUL bytes
// (nlohmann treats them as end of input) and nesting deeper than the format needs.
void scan_header(std::string_view text, const std::string& src) {
  MINIDL_CHECK(text.find('\0') == std::string_view::npos, prefix(src),
               "header contains a NUL byte (invalid JSON)");
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      MINIDL_CHECK(++depth <= kMaxNesting, prefix(src), "header JSON is nested too deeply");
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
}

uint64_t get_uint(const json& v, const std::string& what, const std::string& src) {
  bool ok = v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
  MINIDL_CHECK(ok, prefix(src), what, " must be a non-negative integer, got ", v.dump());
  return v.get<uint64_t>();
}

DType parse_dtype(const json& v, const std::string& name, const std::string& src) {
  MINIDL_CHECK(v.is_string(), prefix(src), "tensor '", name, "': dtype must be a string, got ",
               v.dump());
  const std::string s = v.get<std::string>();
  for (const auto& d : kDTypes) {
    if (s == d.name) return d.dtype;
  }
  for (const char* u : kUnsupportedDTypes) {
    if (s != u) continue;
    std::string supported;
    for (const auto& d : kDTypes) supported += (supported.empty() ? "" : " ") + std::string(d.name);
    MINIDL_FAIL(prefix(src), "tensor '", name, "': dtype ", s,
                " is not supported by minidl (supported: ", supported, ")");
  }
  MINIDL_FAIL(prefix(src), "tensor '", name, "': unknown dtype '", s, "'");
}

SafetensorsEntry parse_entry(const std::string& name, const json& v, const std::string& src) {
  const std::string where = prefix(src) + "tensor '" + name + "': ";
  MINIDL_CHECK(v.is_object(), where, "header entry must be an object, got ", v.dump());
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    MINIDL_CHECK(v.contains(field), where, "missing field '", field, "'");
  }
  SafetensorsEntry e;
  e.name = name;
  e.dtype = parse_dtype(v["dtype"], name, src);

  const json& shape = v["shape"];
  MINIDL_CHECK(shape.is_array(), where, "shape must be an array, got ", shape.dump());
  // The product of the non-zero dims must fit int64 (strides), even for zero-size tensors.
  uint64_t prod = 1;
  bool has_zero = false;
  for (const json& d : shape) {
    uint64_t dim = get_uint(d, "tensor '" + name + "': shape entry", src);
    if (dim == 0) has_zero = true;
    MINIDL_CHECK(dim == 0 || !__builtin_mul_overflow(prod, dim, &prod), where, "shape ",
                 shape.dump(), " overflows the element count");
    MINIDL_CHECK(prod <= uint64_t(std::numeric_limits<int64_t>::max()), where, "shape ",
                 shape.dump(), " overflows the element count");
    e.shape.push_back(int64_t(dim));
  }
  const uint64_t numel = has_zero ? 0 : prod;
  uint64_t nbytes = 0;
  MINIDL_CHECK(!__builtin_mul_overflow(numel, uint64_t(itemsize(e.dtype)), &nbytes), where,
               "shape ", shape.dump(), " overflows the byte count");

  const json& off = v["data_offsets"];
  MINIDL_CHECK(off.is_array() && off.size() == 2, where,
               "data_offsets must be an array [begin, end], got ", off.dump());
  e.begin = get_uint(off[0], "tensor '" + name + "': data_offsets begin", src);
  e.end = get_uint(off[1], "tensor '" + name + "': data_offsets end", src);
  MINIDL_CHECK(e.begin <= e.end, where, "data_offsets ", off.dump(), " end before begin");
  MINIDL_CHECK(e.end - e.begin == nbytes, where, "data_offsets ", off.dump(), " span ",
               e.end - e.begin, " bytes but dtype ", safetensors_dtype_name(e.dtype), " shape ",
               shape_str(e.shape), " needs ", nbytes);
  return e;
}

// Parses and validates the JSON header against a data buffer of `data_size` bytes.
Header parse_header(std::string_view text, uint64_t data_size, const std::string& src) {
  MINIDL_CHECK(!text.empty() && text[0] == '{', prefix(src),
               "header must be a JSON object starting with '{'");
  scan_header(text, src);
  // Duplicate keys: nlohmann keeps the last one silently, so track keys per object.
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  size_t duplicate_depth = 0;
  auto track = [&](int, json::parse_event_t ev, json& v) {
    if (ev == json::parse_event_t::object_start) keys.emplace_back();
    if (ev == json::parse_event_t::object_end) keys.pop_back();
    if (ev == json::parse_event_t::key && !keys.back().insert(v.get<std::string>()).second &&
        duplicate.empty()) {
      duplicate = v.get<std::string>();
      duplicate_depth = keys.size();
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text.begin(), text.end(), track);
  } catch (const json::exception& e) {
    MINIDL_FAIL(prefix(src), "invalid JSON header: ", e.what());
  }
  MINIDL_CHECK(duplicate.empty(), prefix(src), "duplicate ",
               duplicate_depth == 1 ? "tensor name '" : "key '", duplicate, "' in the header");
  MINIDL_CHECK(j.is_object(), prefix(src), "header must be a JSON object");

  Header h;
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      if (v.is_null()) continue;
      MINIDL_CHECK(v.is_object(), prefix(src), "__metadata__ must be an object of strings");
      for (const auto& [k, s] : v.items()) {
        MINIDL_CHECK(s.is_string(), prefix(src), "__metadata__ value of '", k,
                     "' must be a string, got ", s.dump());
        h.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    SafetensorsEntry e = parse_entry(name, v, src);
    MINIDL_CHECK(e.end <= data_size, prefix(src), "tensor '", name, "': data_offsets [", e.begin,
                 ", ", e.end, "] are out of the data buffer (", data_size, " bytes)");
    h.entries.emplace(name, std::move(e));
  }

  // The data buffer must be covered exactly: sorted by offsets, each tensor starts where the
  // previous one ended, the last one ends at the end of the buffer.
  std::vector<const SafetensorsEntry*> order;
  for (const auto& [name, e] : h.entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return std::pair(a->begin, a->end) < std::pair(b->begin, b->end);
  });
  uint64_t pos = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry* e : order) {
    MINIDL_CHECK(e->begin >= pos, prefix(src), "tensor '", e->name, "': data_offsets [", e->begin,
                 ", ", e->end, "] overlap tensor '", prev ? prev->name : "", "'");
    MINIDL_CHECK(e->begin == pos, prefix(src), "tensor '", e->name, "': data_offsets [", e->begin,
                 ", ", e->end, "] leave a hole of ", e->begin - pos, " bytes in the data buffer");
    pos = e->end;
    prev = e;
  }
  MINIDL_CHECK(pos == data_size, prefix(src), "tensors cover ", pos,
               " bytes but the data buffer has ", data_size, " (trailing bytes)");
  return h;
}

// Splits a complete file image: validates the size field and parses the header.
Header parse_image(const std::string& bytes, const std::string& src, uint64_t* data_start) {
  MINIDL_CHECK(bytes.size() >= 8, prefix(src), "too short (", bytes.size(),
               " bytes) for the 8-byte header size");
  const uint64_t n = read_le64(bytes.data());
  check_header_size(n, bytes.size(), src);
  *data_start = 8 + n;
  return parse_header(std::string_view(bytes).substr(8, n), bytes.size() - 8 - n, src);
}

// bool bytes other than 0/1 are not valid C++ bools: normalise them.
void normalise_bool(Tensor& t) {
  if (t.dtype() != DType::boolean) return;
  auto* p = static_cast<uint8_t*>(t.data_ptr());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = p[i] != 0;
}

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  for (const auto& d : kDTypes) {
    if (d.dtype == dtype) return d.name;
  }
  MINIDL_FAIL("safetensors: dtype ", dtype, " has no safetensors name");
}

// ---------------------------------------------------------------- reading

std::map<std::string, Tensor> load_safetensors_bytes(const std::string& bytes,
                                                     SafetensorsMetadata* metadata,
                                                     const std::string& source) {
  uint64_t data_start = 0;
  Header h = parse_image(bytes, source, &data_start);
  std::map<std::string, Tensor> out;
  for (const auto& [name, e] : h.entries) {
    Tensor t = empty(e.shape, e.dtype);
    if (e.end > e.begin)
      std::memcpy(t.data_ptr(), bytes.data() + data_start + e.begin, e.end - e.begin);
    normalise_bool(t);
    out.emplace(name, std::move(t));
  }
  if (metadata) *metadata = std::move(h.metadata);
  return out;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  std::error_code ec;
  const uint64_t total = std::filesystem::file_size(path, ec);
  MINIDL_CHECK(!ec, prefix(path), "cannot read: ", ec.message());
  std::ifstream f(path, std::ios::binary);
  MINIDL_CHECK(f, prefix(path), "cannot open for reading");
  MINIDL_CHECK(total >= 8, prefix(path), "too short (", total,
               " bytes) for the 8-byte header size");
  char len[8];
  MINIDL_CHECK(f.read(len, 8), prefix(path), "read of the header size failed");
  const uint64_t n = read_le64(len);
  check_header_size(n, total, path);
  std::string header(n, '\0');
  MINIDL_CHECK(f.read(header.data(), std::streamsize(n)), prefix(path),
               "read of the header failed (file truncated?)");
  Header h = parse_header(header, total - 8 - n, path);
  entries_ = std::move(h.entries);
  metadata_ = std::move(h.metadata);
  data_start_ = 8 + n;
}

std::map<std::string, Tensor> load_safetensors(const std::string& path,
                                               SafetensorsMetadata* metadata) {
  SafetensorsFile file(path);
  std::map<std::string, Tensor> out = file.load_all();
  if (metadata) *metadata = file.metadata();
  return out;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

const SafetensorsEntry& SafetensorsFile::info(const std::string& name) const {
  auto it = entries_.find(name);
  MINIDL_CHECK(it != entries_.end(), prefix(path_), "no tensor named '", name, "'");
  return it->second;
}

std::map<std::string, Tensor> SafetensorsFile::read(
    const std::vector<const SafetensorsEntry*>& which) const {
  std::ifstream f(path_, std::ios::binary);
  MINIDL_CHECK(f, prefix(path_), "cannot open for reading");
  std::map<std::string, Tensor> out;
  for (const SafetensorsEntry* e : which) {
    Tensor t = empty(e->shape, e->dtype);
    const uint64_t nbytes = e->end - e->begin;
    if (nbytes > 0) {
      f.seekg(std::streamoff(data_start_ + e->begin));
      MINIDL_CHECK(f.read(static_cast<char*>(t.data_ptr()), std::streamsize(nbytes)), prefix(path_),
                   "tensor '", e->name, "': read of ", nbytes,
                   " bytes failed (file changed or truncated?)");
    }
    normalise_bool(t);
    out.emplace(e->name, std::move(t));
  }
  return out;
}

Tensor SafetensorsFile::get(const std::string& name) const {
  return read({&info(name)}).begin()->second;
}

std::map<std::string, Tensor> SafetensorsFile::load_all() const {
  std::vector<const SafetensorsEntry*> all;
  for (const auto& [name, e] : entries_) all.push_back(&e);
  return read(all);
}

}  // namespace minidl
