// mnist_ddp's and classify's shared training flags (apps/mnist/flags.h).
#include "apps/mnist/flags.h"

#include <CLI/CLI.hpp>

namespace mnist {

void add_training_flags(CLI::App& app, Options& o) {
  app.add_option("--epochs", o.epochs, "number of epochs")->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "training batch size per process")
      ->capture_default_str();
  app.add_option("--test-batch-size", o.test_batch_size, "evaluation batch size")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", o.lr, "learning rate (peak lr for onecycle)")->capture_default_str();
  app.add_option("--optimizer", o.optimizer, "sgd | adamw")
      ->capture_default_str()
      ->check(CLI::IsMember({"sgd", "adamw"}));
  app.add_option("--momentum", o.momentum, "SGD momentum")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--weight-decay", o.weight_decay, "weight decay (decoupled for adamw)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--scheduler", o.scheduler, "none | step (gamma per epoch) | cosine | onecycle")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "step", "cosine", "onecycle"}));
  app.add_option("--gamma", o.gamma, "StepLR decay per epoch")->capture_default_str();
  minidl::apps::add_run_flags(app, o);
  app.add_option("--workers", o.workers, "data loader worker threads (0: load inline)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-steps", o.max_steps, "stop each epoch after N steps (0: full epoch)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
}

}  // namespace mnist
