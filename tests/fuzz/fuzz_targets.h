// libFuzzer target bodies, shared by the fuzz binaries (MINIDL_FUZZ, one per parser) and the
// normal test build, which replays the committed corpora through them (test_fuzz_regression.cpp).
// Each returns 0; an input may make the parser throw minidl::Error, nothing else.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "nn/container.h"
#include "optim/adam.h"
#include "optim/lr_scheduler.h"

namespace minidl::fuzz {

int fuzz_idx(const uint8_t* data, size_t size);            // IDX reader + MnistDataset
int fuzz_safetensors(const uint8_t* data, size_t size);    // in-memory and lazy file reader
int fuzz_checkpoint(const uint8_t* data, size_t size);     // load_checkpoint + a training step
int fuzz_store_message(const uint8_t* data, size_t size);  // TCP store frames and requests
int fuzz_image(const uint8_t* data, size_t size);          // decode_image, 5 modes; header

// A file path in a per-process scratch directory (removed at exit) holding `size` bytes.
std::string write_scratch(const std::string& name, const void* data, size_t size);

// What fuzz_checkpoint loads into: Linear(3,2) -> ReLU -> Linear(2,2), Adam, StepLR.
struct CheckpointTarget {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Adam> opt;
  std::unique_ptr<optim::StepLR> sched;
  CheckpointTarget();
  void train_step();  // one forward/backward/step on fixed data (uses every loaded state)
};

}  // namespace minidl::fuzz
