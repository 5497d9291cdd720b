// torchvision.datasets.ImageFolder: root/<class>/**/<image>, classes = sorted subfolder names,
// samples in torchvision's order, images decoded by data::read_image (RGB) and converted by
// ToTensor (float32 [0,1]) when no transform is given.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset.h"
#include "data/transforms.h"

namespace minidl::data {

// torchvision's IMG_EXTENSIONS (matched case-insensitively). ImageFolder lists every one of them as
// torchvision does; read_image decodes JPEG and PNG and names the file for the others.
const std::vector<std::string>& image_extensions();
bool has_image_extension(const std::string& filename);

// root/<class>/... -> (path, class index) pairs. get() reads samples()[i] in RGB and returns data =
// transform(uint8 [3,H,W]) when a transform is given (end it with ToTensor(), as with
// torchvision.io + transforms.v2), else ToTensor's float32 [3,H,W] in [0,1]; target int64 [].
// Throws naming `root` when it has no class folder, or a class folder has no image file.
class ImageFolder : public Dataset {
 public:
  explicit ImageFolder(std::string root, std::shared_ptr<const Transform> transform = nullptr);
  int64_t size() const override { return int64_t(samples_.size()); }
  Example get(int64_t index, Generator& gen) const override;

  const std::string& root() const { return root_; }
  const std::vector<std::string>& classes() const { return classes_; }
  const std::map<std::string, int64_t>& class_to_idx() const { return class_to_idx_; }
  const std::vector<std::pair<std::string, int64_t>>& samples() const { return samples_; }
  std::vector<int64_t> targets() const;

 private:
  std::string root_;
  std::shared_ptr<const Transform> transform_;
  std::vector<std::string> classes_;
  std::map<std::string, int64_t> class_to_idx_;
  std::vector<std::pair<std::string, int64_t>> samples_;
};

// torchvision's find_classes: the sorted names of root's subfolders (symlinks followed).
std::vector<std::string> find_classes(const std::string& root);

}  // namespace minidl::data
