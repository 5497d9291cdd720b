// ImageFolder: torchvision's folder walk (sorted classes, then per class a sorted os.walk with
// sorted file names, symlinks followed) and per-sample decoding + transform.
#include "data/image/image_folder.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "data/image/image_io.h"
#include "data/image/image_transforms.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace minidl::data {
namespace fs = std::filesystem;

const std::vector<std::string>& image_extensions() {
  static const std::vector<std::string> exts = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                                ".pgm", ".tif",  ".tiff", ".webp"};
  return exts;
}

bool has_image_extension(const std::string& filename) {
  std::string lower = filename;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  for (const std::string& ext : image_extensions())
    if (lower.size() >= ext.size() &&
        lower.compare(lower.size() - ext.size(), ext.size(), ext) == 0)
      return true;
  return false;
}

std::vector<std::string> find_classes(const std::string& root) {
  std::error_code ec;
  MINIDL_CHECK(fs::is_directory(root, ec), "ImageFolder: '", root, "' is not a directory");
  std::vector<std::string> classes;
  for (const auto& entry : fs::directory_iterator(root, ec))
    if (entry.is_directory(ec)) classes.push_back(entry.path().filename().string());
  MINIDL_CHECK(!ec, "ImageFolder: cannot list '", root, "': ", ec.message());
  // Python's sorted() on str: code point order, which is UTF-8 byte order.
  std::sort(classes.begin(), classes.end());
  MINIDL_CHECK(!classes.empty(), "ImageFolder: couldn't find any class folder in '", root,
               "' (expected root/<class>/<image>)");
  return classes;
}

namespace {

// The image files under `dir` in torchvision's order: os.walk(dir, followlinks=True) visits
// folders, sorted by their path, and each folder's file names sorted.
std::vector<std::string> walk_sorted(const fs::path& dir) {
  std::vector<std::pair<std::string, std::vector<std::string>>> folders;  // (path, files)
  std::vector<fs::path> pending = {dir};
  std::error_code ec;
  while (!pending.empty()) {
    fs::path d = pending.back();
    pending.pop_back();
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(d, ec)) {
      if (entry.is_directory(ec))
        pending.push_back(entry.path());
      else if (entry.is_regular_file(ec) && has_image_extension(entry.path().filename().string()))
        files.push_back(entry.path().filename().string());
    }
    MINIDL_CHECK(!ec, "ImageFolder: cannot list '", d.string(), "': ", ec.message());
    std::sort(files.begin(), files.end());
    folders.emplace_back(d.string(), std::move(files));
  }
  std::sort(folders.begin(), folders.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> paths;
  for (const auto& [folder, files] : folders)
    for (const std::string& f : files) paths.push_back((fs::path(folder) / f).string());
  return paths;
}

}  // namespace

ImageFolder::ImageFolder(std::string root, std::shared_ptr<const Transform> transform)
    : root_(std::move(root)), transform_(std::move(transform)) {
  classes_ = find_classes(root_);
  for (size_t i = 0; i < classes_.size(); ++i) class_to_idx_[classes_[i]] = int64_t(i);
  std::vector<std::string> empty_classes;
  for (size_t i = 0; i < classes_.size(); ++i) {
    std::vector<std::string> paths = walk_sorted(fs::path(root_) / classes_[i]);
    if (paths.empty()) empty_classes.push_back(classes_[i]);
    for (std::string& p : paths) samples_.emplace_back(std::move(p), int64_t(i));
  }
  if (!empty_classes.empty()) {
    std::string names, exts;
    for (const auto& c : empty_classes) names += (names.empty() ? "" : ", ") + c;
    for (const auto& e : image_extensions()) exts += (exts.empty() ? "" : ", ") + e;
    MINIDL_FAIL("ImageFolder: found no valid file for the classes ", names, " in '", root_,
                "'. Supported extensions are: ", exts);
  }
}

std::vector<int64_t> ImageFolder::targets() const {
  std::vector<int64_t> t;
  t.reserve(samples_.size());
  for (const auto& s : samples_) t.push_back(s.second);
  return t;
}

Example ImageFolder::get(int64_t index, Generator& gen) const {
  MINIDL_CHECK(index >= 0 && index < size(), "ImageFolder: index ", index, " out of range for ",
               size(), " samples in '", root_, "'");
  const auto& [path, target] = samples_[size_t(index)];
  Tensor image = read_image(path, ImageReadMode::RGB);  // uint8 [3,H,W]
  Tensor data = transform_ ? (*transform_)(image, gen) : to_tensor(image);
  return {data, scalar_tensor(target, DType::i64)};
}

}  // namespace minidl::data
