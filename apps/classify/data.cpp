// classify's datasets and transforms: torchvision's ImageNet recipe (RandomResizedCrop + flip for
// training, Resize to size*256/224 + CenterCrop for evaluation), the CIFAR recipe (4-pixel-style
// padded RandomCrop + flip), or none (Resize + CenterCrop only when --image-size asks for it).
#include "apps/classify/data.h"

#include <cmath>
#include <memory>

#include "data/image/cifar10.h"
#include "data/image/image_folder.h"
#include "data/image/image_io.h"
#include "data/image/image_transforms.h"
#include "data/transforms.h"
#include "tensor/error.h"

namespace classify {

using namespace minidl;
using TransformPtr = std::shared_ptr<const data::Transform>;

namespace {

std::shared_ptr<data::Compose> compose(std::vector<TransformPtr> ts) {
  return std::make_shared<data::Compose>(std::move(ts));
}

// (train, eval) transforms on uint8 [3,H,W] images of native size `native` (0: varies).
std::pair<TransformPtr, TransformPtr> recipes(const Options& o, int64_t native,
                                              const std::vector<double>& mean,
                                              const std::vector<double>& std) {
  const int64_t n = o.image_size;
  auto to_tensor = std::make_shared<data::ToTensor>();
  auto normalize = std::make_shared<data::Normalize>(mean, std);
  // Resize + CenterCrop unless the images already have the size.
  auto fit = [&](int64_t resize_to) -> std::vector<TransformPtr> {
    if (native == n && resize_to == n) return {};
    return {std::make_shared<data::Resize>(resize_to), std::make_shared<data::CenterCrop>(n)};
  };
  std::vector<TransformPtr> train, eval;
  if (o.augment == "imagenet") {
    train = {std::make_shared<data::RandomResizedCrop>(n),
             std::make_shared<data::RandomHorizontalFlip>()};
    eval = fit(int64_t(std::floor(double(n) * 256.0 / 224.0)));
  } else if (o.augment == "crop") {
    train = fit(n);
    train.push_back(std::make_shared<data::ToTensor>());
    train.push_back(std::make_shared<data::RandomCrop>(n, std::max<int64_t>(1, n / 8)));
    train.push_back(std::make_shared<data::RandomHorizontalFlip>());
    eval = fit(n);
  } else {
    MINIDL_CHECK(o.augment == "none", "--augment must be none, crop or imagenet, got '", o.augment,
                 "'");
    train = fit(n);
    eval = fit(n);
  }
  if (o.augment != "crop") train.push_back(to_tensor);
  train.push_back(normalize);
  eval.push_back(to_tensor);
  eval.push_back(normalize);
  return {compose(train), compose(eval)};
}

}  // namespace

mnist::TrainData make_data(Options& o) {
  mnist::TrainData d;
  if (o.dataset == "cifar10") {
    if (o.image_size == 0) o.image_size = 32;
    auto [train_t, eval_t] = recipes(o, 32, {0.4914, 0.4822, 0.4465}, {0.2470, 0.2435, 0.2616});
    auto test = std::make_shared<data::CIFAR10>(o.data, false, eval_t);
    d.train = std::make_shared<data::CIFAR10>(o.data, true, train_t);
    o.classes = test->classes();
    d.test = test;
    return d;
  }
  MINIDL_CHECK(o.dataset == "imagefolder", "--dataset must be imagefolder or cifar10, got '",
               o.dataset, "'");
  const std::string train_root = o.data + "/" + o.train_dir, val_root = o.data + "/" + o.val_dir;
  auto probe = std::make_shared<data::ImageFolder>(train_root);
  o.classes = probe->classes();
  // The native size: the first training image's (checked again by the batches' collation).
  const data::ImageInfo info = data::read_image_info(probe->samples().front().first);
  const int64_t native = info.height == info.width ? info.height : 0;
  if (o.image_size == 0) {
    MINIDL_CHECK(native > 0, "the first training image ", probe->samples().front().first, " is ",
                 info.height, "x", info.width, ", not square: pass --image-size N");
    o.image_size = native;
  }
  auto [train_t, eval_t] = recipes(o, native, {0.485, 0.456, 0.406}, {0.229, 0.224, 0.225});
  d.train = std::make_shared<data::ImageFolder>(train_root, train_t);
  auto val = std::make_shared<data::ImageFolder>(val_root, eval_t);
  MINIDL_CHECK(val->classes() == o.classes, "the classes of ", val_root, " (",
               val->classes().size(), ") differ from those of ", train_root, " (", o.classes.size(),
               "): both need the same class folders");
  d.test = val;
  return d;
}

std::string describe_data(const Options& o) {
  const std::string what =
      o.dataset == "cifar10" ? "CIFAR-10 " + o.data : "ImageFolder " + o.data + "/" + o.train_dir;
  return what + " (" + std::to_string(o.classes.size()) + " classes), " +
         std::to_string(o.image_size) + "x" + std::to_string(o.image_size) + ", augment " +
         o.augment;
}

}  // namespace classify
