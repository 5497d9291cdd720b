// The training flags mnist_ddp and classify share (apps/mnist/trainer.h's Options): epochs, batch
// sizes, optimizer, scheduler, loader workers, step limit, and the run flags of apps/common.
#pragma once

#include "apps/mnist/trainer.h"

namespace CLI {
class App;
}

namespace mnist {

// --epochs, --batch-size, --test-batch-size, --lr, --optimizer, --momentum, --weight-decay,
// --scheduler, --gamma, the run flags (apps::add_run_flags), --workers and --max-steps.
void add_training_flags(CLI::App& app, Options& o);

}  // namespace mnist
