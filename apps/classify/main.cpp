// classify: trains a torchvision ResNet (or resnet-mini) on an ImageFolder (ROOT/train, evaluated
// on ROOT/val) or CIFAR-10, with mnist_ddp's run: -n/DDP/DP, --amp, --device, checkpoints, --resume
// auto, progress bar, JSON metrics. `classify --help` lists every flag.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "apps/classify/data.h"
#include "apps/common/checkpoints.h"
#include "apps/common/ddp_features.h"
#include "apps/mnist/flags.h"
#include "nn/models/resnet.h"
#include "nn/models/resnet_mini.h"
#include "tensor/profiler.h"

namespace {

using namespace minidl;

std::shared_ptr<nn::Module> make_classifier(const std::string& name, int64_t num_classes) {
  if (name == "resnet18") return models::resnet18(num_classes);
  if (name == "resnet34") return models::resnet34(num_classes);
  if (name == "resnet50") return models::resnet50(num_classes);
  if (name == "resnet-mini") return models::resnet_mini(3, num_classes, /*log_softmax=*/false);
  MINIDL_FAIL("--model must be resnet18, resnet34, resnet50 or resnet-mini, got '", name, "'");
}

}  // namespace

int main(int argc, char** argv) {
  classify::Options o;
  o.app_name = "classify";
  o.data = "";
  o.model = "resnet18";
  o.epochs = 2;
  o.lr = 1e-3;
  o.test_batch_size = 256;
  CLI::App app{"classify: train a ResNet on your own images (ImageFolder) or CIFAR-10", "classify"};
  app.get_formatter()->column_width(34);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--data", o.data,
                 "ImageFolder root holding train/ and val/ class folders, or the CIFAR-10 "
                 "binary folder")
      ->required();
  app.add_option("--dataset", o.dataset, "imagefolder | cifar10")
      ->capture_default_str()
      ->check(CLI::IsMember({"imagefolder", "cifar10"}));
  app.add_option("--train-dir", o.train_dir, "training folder under --data")->capture_default_str();
  app.add_option("--val-dir", o.val_dir, "evaluation folder under --data")->capture_default_str();
  app.add_option("--model", o.model, "resnet18 | resnet34 | resnet50 | resnet-mini")
      ->capture_default_str()
      ->check(CLI::IsMember({"resnet18", "resnet34", "resnet50", "resnet-mini"}));
  app.add_option("--image-size", o.image_size,
                 "train and evaluate at NxN (0: the images' own size)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--augment", o.augment,
                 "none | crop (padded random crop + flip, CIFAR) | imagenet (RandomResizedCrop + "
                 "flip; eval Resize + CenterCrop)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "crop", "imagenet"}));
  mnist::add_training_flags(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "classify: error: %s (see --help)\n", e.what());
    return 2;
  }
  for (const std::string& why :
       {minidl::apps::ddp_flags_error(o), minidl::apps::amp_flags_error(o)}) {
    if (!why.empty()) {
      std::fprintf(stderr, "classify: error: %s\n", why.c_str());
      return 2;
    }
  }
  if (int rc = 0; minidl::apps::self_launch_if_requested(o, "classify", argc, argv, rc)) return rc;
  try {
    minidl::apps::install_stop_handlers();
    // The data first (it names the classes), then a model with one output per class.
    o.make_data = [&o](const mnist::Options&) { return classify::make_data(o); };
    o.make_model = [&o](const mnist::Options&) {
      return make_classifier(o.model, int64_t(o.classes.size()));
    };
    o.model_outputs_logits = true;  // every model here ends in its linear layer
    mnist::Result r = mnist::run_training(o);
    if (!r.main_rank) return r.interrupted ? 130 : 0;
    if (r.interrupted) {
      std::fprintf(stderr, "classify: interrupted; %s\n",
                   o.checkpoint_dir.empty()
                       ? "no checkpoint directory was given"
                       : ("the last complete checkpoint is in " + o.checkpoint_dir).c_str());
      return 130;
    }
    if (minidl::profiler::enabled())
      std::printf("op profile, rank 0 (all iterations):\n%s", minidl::profiler::table().c_str());
    std::printf(
        "classify: %s on %s: test accuracy %.2f%% (%lld/%lld), test loss %.4f, %lld epoch(s) in "
        "%.1f s, %.0f train images/s (%s), loader wait %.1f%% of train time, peak memory "
        "%s%s%s%s%s\n",
        o.model.c_str(), classify::describe_data(o).c_str(), r.test_accuracy, (long long)r.correct,
        (long long)r.test_samples, r.test_loss, (long long)r.epochs_run, r.seconds,
        r.train_samples_per_s, r.layout.c_str(), 100.0 * r.loader_wait_fraction,
        r.peak_memory.c_str(), r.amp.empty() ? "" : "; ", r.amp.c_str(),
        r.ddp_features.empty() ? "" : "; ", r.ddp_features.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "classify: error: %s\n", e.what());
    return 1;
  }
}
