// classify's data: an ImageFolder pair (ROOT/train, ROOT/val) or CIFAR-10's binary batches, with
// torchvision's recipes for the transforms (--augment none | crop | imagenet) and --image-size.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "apps/mnist/trainer.h"

namespace classify {

// classify's own flags on top of mnist_ddp's run (apps/mnist/trainer.h).
struct Options : mnist::Options {
  std::string dataset = "imagefolder";               // imagefolder | cifar10
  std::string train_dir = "train", val_dir = "val";  // under --data, for imagefolder
  int64_t image_size = 0;        // 0: the images' own size (the first training image's)
  std::string augment = "none";  // none | crop (pad + random crop + flip) | imagenet
  // Filled by make_data: the classes, for the model's output size.
  std::vector<std::string> classes;
};

// The train and test datasets for `o` (also sets o.classes and, for 0, o.image_size). Throws naming
// the folder or file when they are missing or unreadable.
mnist::TrainData make_data(Options& o);

// One line: "ImageFolder ROOT/train (10 classes), 224x224, augment imagenet".
std::string describe_data(const Options& o);

}  // namespace classify
