// Golden training trajectories: an MLP and the classic MNIST CNN trained 20 steps with SGD
// (momentum) and AdamW from closed-form weights/inputs; per-step losses and final weights must
// match PyTorch (tools/golden/gen_trajectories.py -> tests/data/golden_traj.json), f32 and f64.
#include "training_golden_util.h"

using namespace minidl;
using namespace golden_traj;

TEST_CASE("training golden: MLP + SGD(momentum) matches PyTorch") {
  run_case("mlp", "sgd");
}
TEST_CASE("training golden: MLP + AdamW matches PyTorch") {
  run_case("mlp", "adamw");
}
TEST_CASE("training golden: MNIST CNN + SGD(momentum) matches PyTorch") {
  run_case("cnn", "sgd");
}
TEST_CASE("training golden: MNIST CNN + AdamW matches PyTorch") {
  run_case("cnn", "adamw");
}
