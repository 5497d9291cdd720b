// Guide example "Your own images" (docs/guide.md): digits written out as PNG files in class
// folders, read back with data::ImageFolder and torchvision's transforms, a torchvision ResNet-18
// trained for a few steps and its weights saved under torchvision's names.
// Usage: own_images DATA_DIR [STEPS]
#include <cstdio>
#include <filesystem>
#include <string>

#include "minidl.h"
using namespace minidl;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  const std::string digits_dir = argc > 1 ? argv[1] : "data/mnist";
  const int steps = argc > 2 ? std::atoi(argv[2]) : 30;
  const fs::path root = fs::temp_directory_path() / "minidl_own_images";
  fs::remove_all(root);
  // 300 digits as root/train/<label>/<i>.png and 100 as root/val/...: an ImageFolder.
  data::MnistDataset mnist(digits_dir, data::MnistSplit::train);
  Generator g0(0);
  std::string first_png;
  for (int64_t i = 0; i < 400; ++i) {
    data::Example e = mnist.get(i, g0);  // data f32 [1,28,28] in [0,1]
    const fs::path dir =
        root / (i < 300 ? "train" : "val") / std::to_string(e.target.item<int64_t>());
    fs::create_directories(dir);
    data::write_png(data::convert_image_dtype(e.data, DType::u8),
                    (dir / (std::to_string(i) + ".png")).string());
    if (i == 0) first_png = (dir / "0.png").string();
  }

  // [snippet:decode]
  // torchvision.io: uint8 [C,H,W] from a JPEG or PNG file, in the channels asked for.
  Tensor img = data::read_image(first_png, data::ImageReadMode::RGB);
  std::printf("read_image: %s\n", img.shape_str().c_str());  // [3,28,28], uint8
  // [/snippet]

  // [snippet:folder]
  // torchvision.datasets.ImageFolder: classes are the sorted folder names; the transform gets the
  // uint8 image and ends with ToTensor (float [0,1]) and Normalize.
  using TransformList = std::vector<std::shared_ptr<const data::Transform>>;
  auto train_tf = std::make_shared<data::Compose>(
      TransformList{std::make_shared<data::RandomResizedCrop>(32, std::pair{0.6, 1.0}),
                    std::make_shared<data::ToTensor>(),
                    std::make_shared<data::Normalize>(std::vector{0.5}, std::vector{0.5})});
  auto val_tf = std::make_shared<data::Compose>(
      TransformList{std::make_shared<data::Resize>(32), std::make_shared<data::CenterCrop>(32),
                    std::make_shared<data::ToTensor>(),
                    std::make_shared<data::Normalize>(std::vector{0.5}, std::vector{0.5})});
  auto train_set = std::make_shared<data::ImageFolder>((root / "train").string(), train_tf);
  auto val_set = std::make_shared<data::ImageFolder>((root / "val").string(), val_tf);
  std::printf("%lld training images, classes %s..%s\n", (long long)train_set->size(),
              train_set->classes().front().c_str(), train_set->classes().back().c_str());
  // Decoding and augmentation run in the loader's worker threads.
  data::DataLoader loader(train_set, {.batch_size = 32, .shuffle = true, .num_workers = 2});
  // [/snippet]

  // [snippet:resnet]
  // torchvision's ResNet-18: the same module names, so state_dict() keys equal torchvision's.
  manual_seed(0);
  auto model = models::resnet18(/*num_classes=*/int64_t(train_set->classes().size()));
  optim::AdamW opt(model->parameters(), /*lr=*/1e-3);
  int step = 0;
  for (int epoch = 0; step < steps; ++epoch)
    for (data::Example& batch : loader.epoch(epoch)) {
      Tensor loss = cross_entropy((*model)(batch.data), batch.target);  // logits [B,10]
      opt.zero_grad();
      loss.backward();
      opt.step();
      if (++step % 10 == 0) std::printf("step %d loss %.3f\n", step, loss.item<double>());
      if (step == steps) break;
    }
  // Weights under torchvision's names ("layer1.0.conv1.weight", ...): a torchvision checkpoint
  // converted to safetensors loads the same way with load_safetensors + load_state_dict.
  save_safetensors(model->state_dict(), "resnet18_digits.safetensors");
  // [/snippet]

  model->eval();
  NoGradGuard no_grad;
  int64_t correct = 0;
  data::DataLoader val_loader(val_set, {.batch_size = 100});
  for (data::Example& b : val_loader.epoch(0))
    correct += eq(argmax((*model)(b.data), 1), b.target).sum().item<int64_t>();
  std::printf("own_images: %d steps, val accuracy %.1f%% (%lld/%lld)\n", steps,
              100.0 * double(correct) / double(val_set->size()), (long long)correct,
              (long long)val_set->size());
  fs::remove_all(root);
  return 0;
}
