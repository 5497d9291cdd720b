// MNIST IDX files: reading (raw or gzip, detected by content, every header field and the payload
// length validated), atomic writing (gzip for .gz names), and MnistDataset (x:[N,1,28,28] f32).
#include "data/mnist.h"

#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "tensor/atomic_file.h"
#include "tensor/error.h"
#include "autograd/ops.h"

namespace minidl::data {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxIdxBytes = int64_t(1) << 31;  // payload limit (2 GiB)
constexpr int kMaxDims = 4;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_gzip(const std::vector<uint8_t>& b) {
  return b.size() >= 2 && b[0] == 0x1f && b[1] == 0x8b;
}

std::string hex_bytes(const std::vector<uint8_t>& b, size_t n) {
  std::string out;
  char buf[4];
  for (size_t i = 0; i < std::min(n, b.size()); ++i) {
    std::snprintf(buf, sizeof(buf), "%s%02x", i ? " " : "", b[i]);
    out += buf;
  }
  return out.empty() ? "nothing (empty file)" : out;
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::error_code ec;
  MINIDL_CHECK(fs::exists(path, ec), "read_idx: file '", path, "' does not exist");
  MINIDL_CHECK(!fs::is_directory(path, ec), "read_idx: '", path, "' is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  MINIDL_CHECK(in, "read_idx: cannot open '", path, "'");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  MINIDL_CHECK(!in.bad(), "read_idx: I/O error reading '", path, "'");
  return bytes;
}

// Inflates one or more concatenated gzip members. Memory grows only with real output, capped
// at the largest valid IDX file, so a hostile header or a zip bomb cannot exhaust memory.
std::vector<uint8_t> gunzip(const std::vector<uint8_t>& in, const std::string& path) {
  const auto fail = [&](const std::string& why) {
    MINIDL_FAIL("read_idx: '", path, "' looks gzip-compressed (starts with 1f 8b) but cannot be ",
                "decompressed: ", why, "; is the download truncated or corrupt?");
  };
  constexpr int64_t kCap = kMaxIdxBytes + 4 + 4 * kMaxDims;
  std::vector<uint8_t> out;
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 16) != Z_OK) fail("zlib inflateInit2 failed");
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = uInt(in.size());  // IDX inputs are far below 4 GiB; checked by the caller
  uint8_t chunk[1 << 16];
  int rc = Z_OK;
  while (true) {
    zs.next_out = chunk;
    zs.avail_out = sizeof(chunk);
    rc = inflate(&zs, Z_NO_FLUSH);
    out.insert(out.end(), chunk, chunk + (sizeof(chunk) - zs.avail_out));
    if (int64_t(out.size()) > kCap) {
      inflateEnd(&zs);
      fail("more than 2 GiB of data");
    }
    if (rc == Z_STREAM_END) {
      if (zs.avail_in == 0) break;
      if (zs.avail_in >= 2 && zs.next_in[0] == 0x1f && zs.next_in[1] == 0x8b) {
        inflateReset(&zs);  // another gzip member follows (as `cat a.gz b.gz` produces)
        continue;
      }
      const size_t extra = zs.avail_in;
      inflateEnd(&zs);
      fail(detail::concat(extra, " trailing bytes after the gzip stream"));
    }
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
      inflateEnd(&zs);
      fail("the gzip stream ends early");
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      const std::string msg = zs.msg ? zs.msg : "zlib error " + std::to_string(rc);
      inflateEnd(&zs);
      fail(msg);
    }
  }
  inflateEnd(&zs);
  return out;
}

std::string gzip_bytes(const std::vector<uint8_t>& in, const std::string& path) {
  z_stream zs{};
  MINIDL_CHECK(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK,
               "write_idx: zlib deflateInit2 failed for '", path, "'");
  std::string out(deflateBound(&zs, uLong(in.size())), '\0');
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = uInt(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = uInt(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  MINIDL_CHECK(rc == Z_STREAM_END, "write_idx: gzip compression of '", path, "' failed (", rc, ")");
  return out;
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

std::string dims_str(const std::vector<int64_t>& d) {
  return shape_str(d);
}

}  // namespace

IdxArray read_idx(const std::string& path) {
  return parse_idx(read_file_bytes(path), path);
}

IdxArray parse_idx(std::vector<uint8_t> raw, const std::string& path) {
  MINIDL_CHECK(raw.size() < (size_t(1) << 32), "read_idx: '", path, "' is larger than 4 GiB");
  const bool compressed = is_gzip(raw);
  std::vector<uint8_t> b = compressed ? gunzip(raw, path) : std::move(raw);

  if (b.size() < 4 || b[0] != 0 || b[1] != 0) {
    std::string hint = "is this an MNIST IDX file?";
    if (is_gzip(b))
      hint = "the decompressed data looks gzip-compressed again (1f 8b): decompress it once more";
    else if (ends_with(path, ".gz"))
      hint =
          "the name ends in .gz but the content is not gzip-compressed; is this an MNIST IDX "
          "file?";
    MINIDL_FAIL("read_idx: '", path, "' does not start with an IDX magic number (00 00 08 <ndims>",
                "); found ", hex_bytes(b, 4), "; ", hint);
  }
  MINIDL_CHECK(b[2] == 0x08, "read_idx: '", path, "' has IDX element type 0x", hex_bytes({b[2]}, 1),
               "; only unsigned bytes (type 0x08) are supported");
  const int ndims = b[3];
  MINIDL_CHECK(ndims >= 1 && ndims <= kMaxDims, "read_idx: '", path, "' declares ", ndims,
               " dims; expected 1 to ", kMaxDims);
  const size_t header = 4 + 4 * size_t(ndims);
  MINIDL_CHECK(b.size() >= header, "read_idx: '", path, "' ends inside the header: expected ",
               header, " header bytes for ", ndims, " dims, found ", b.size());
  IdxArray out;
  int64_t numel = 1;
  for (int d = 0; d < ndims; ++d) {
    const int64_t n = be32(&b[4 + 4 * size_t(d)]);
    out.dims.push_back(n);
    numel *= n;  // n < 2^32 and numel <= 2^31 before this step: no overflow in int64
    MINIDL_CHECK(numel <= kMaxIdxBytes, "read_idx: '", path, "' declares dims ", dims_str(out.dims),
                 "...: more than 2^31 elements");
  }
  const size_t found = b.size() - header;
  MINIDL_CHECK(found >= size_t(numel), "read_idx: '", path, "' is truncated: expected ", numel,
               " bytes of ", ndims >= 3 ? "image" : "label", " data after the header (dims ",
               dims_str(out.dims), "), found ", found);
  MINIDL_CHECK(found == size_t(numel), "read_idx: '", path, "' has ", found - size_t(numel),
               " trailing bytes after the ", numel, " bytes of data for dims ", dims_str(out.dims));
  out.bytes.assign(b.begin() + std::ptrdiff_t(header), b.end());
  return out;
}

void write_idx(const std::string& path, const IdxArray& array) {
  const size_t nd = array.dims.size();
  MINIDL_CHECK(nd >= 1 && nd <= size_t(kMaxDims), "write_idx: '", path, "': ", nd,
               " dims; IDX files here have 1 to ", kMaxDims);
  int64_t numel = 1;
  for (int64_t d : array.dims) {
    MINIDL_CHECK(d >= 0 && d <= int64_t(UINT32_MAX), "write_idx: '", path, "': bad dims ",
                 dims_str(array.dims));
    numel *= d;
    MINIDL_CHECK(numel <= kMaxIdxBytes, "write_idx: '", path, "': dims ", dims_str(array.dims),
                 " exceed 2^31 elements");
  }
  MINIDL_CHECK(size_t(numel) == array.bytes.size(), "write_idx: '", path, "': dims ",
               dims_str(array.dims), " need ", numel, " bytes, got ", array.bytes.size());
  std::vector<uint8_t> file = {0, 0, 0x08, uint8_t(nd)};
  for (int64_t d : array.dims)
    for (int shift = 24; shift >= 0; shift -= 8) file.push_back(uint8_t(uint64_t(d) >> shift));
  file.insert(file.end(), array.bytes.begin(), array.bytes.end());
  if (ends_with(path, ".gz"))
    write_file_atomic(path, gzip_bytes(file, path));
  else
    write_file_atomic(path, std::string(file.begin(), file.end()));
}

std::string mnist_images_file(MnistSplit split) {
  return split == MnistSplit::train ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte";
}
std::string mnist_labels_file(MnistSplit split) {
  return split == MnistSplit::train ? "train-labels-idx1-ubyte" : "t10k-labels-idx1-ubyte";
}

MnistDataset::MnistDataset(const std::string& dir, MnistSplit split) {
  const char* split_name = split == MnistSplit::train ? "train" : "test";
  const std::string names[2] = {mnist_images_file(split), mnist_labels_file(split)};
  std::string paths[2], missing;
  for (int k = 0; k < 2; ++k) {
    std::error_code ec;
    for (const std::string& candidate : {names[k], names[k] + ".gz"}) {
      const fs::path p = fs::path(dir) / candidate;
      if (fs::is_regular_file(p, ec)) {
        paths[k] = p.string();
        break;
      }
    }
    if (paths[k].empty()) missing += (missing.empty() ? "" : ", ") + names[k] + "[.gz]";
  }
  MINIDL_CHECK(missing.empty(), "MNIST ", split_name, " split: missing ", missing, " in '", dir,
               "' (expected ", names[0], " and ", names[1],
               ", raw or .gz); run `bash tools/fetch-mnist.sh` to fetch the offline digits ",
               "(data/mnist/) or pass --data DIR with real MNIST");

  const IdxArray img = read_idx(paths[0]);
  const IdxArray lab = read_idx(paths[1]);
  MINIDL_CHECK(img.dims.size() == 3 && img.dims[1] == 28 && img.dims[2] == 28, "MNIST images '",
               paths[0], "' have dims ", dims_str(img.dims), "; expected [N, 28, 28]");
  MINIDL_CHECK(lab.dims.size() == 1, "MNIST labels '", paths[1], "' have dims ", dims_str(lab.dims),
               "; expected [N]");
  const int64_t n = img.dims[0];
  MINIDL_CHECK(lab.dims[0] == n, "MNIST ", split_name, " split in '", dir, "': ", n, " images but ",
               lab.dims[0], " labels");
  for (int64_t i = 0; i < n; ++i)
    MINIDL_CHECK(lab.bytes[size_t(i)] <= 9, "MNIST labels '", paths[1], "': label ",
                 int(lab.bytes[size_t(i)]), " at index ", i, " is outside 0..9");

  // Build into locals and assign at the end: a failed load leaves nothing half-filled.
  Tensor images = empty({n, 1, 28, 28}, kFloat32);
  float* px = images.data_ptr<float>();
  for (size_t i = 0; i < img.bytes.size(); ++i) px[i] = float(img.bytes[i]) / 255.0f;
  Tensor labels = empty({n}, kInt64);
  int64_t* py = labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) py[i] = lab.bytes[size_t(i)];
  images_ = std::move(images);
  labels_ = std::move(labels);
}

int64_t MnistDataset::size() const {
  return labels_.defined() ? labels_.size(0) : 0;
}

Example MnistDataset::get(int64_t index, Generator&) const {
  MINIDL_CHECK(index >= 0 && index < size(), "MnistDataset::get: index ", index,
               " out of range for a dataset of ", size(), " samples");
  // Copies, so a transform that works in place cannot alter the dataset.
  return {images_[index].clone(), labels_[index].clone()};  // [1,28,28], 0-d int64
}

Example MnistDataset::get_batch(const std::vector<int64_t>& indices, Generator&) const {
  for (size_t k = 0; k < indices.size(); ++k)
    MINIDL_CHECK(indices[k] >= 0 && indices[k] < size(), "MnistDataset::get_batch: index ",
                 indices[k], " (position ", k, ") out of range for a dataset of ", size(),
                 " samples");
  const Tensor idx = tensor(indices);
  return {index_select(images_, 0, idx), index_select(labels_, 0, idx)};  // [B,1,28,28], [B]
}

}  // namespace minidl::data
