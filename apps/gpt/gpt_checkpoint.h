// gpt checkpoints: one atomic safetensors file with the model, AdamW state, AMP state, every
// rank's RNG state, and the model config and byte vocabulary as metadata, so `gpt sample` can
// rebuild the model from the file alone.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "apps/common/amp_run.h"
#include "apps/gpt/gpt_model.h"
#include "apps/gpt/gpt_trainer.h"
#include "apps/gpt/text_data.h"

namespace gpt {

void save_training_checkpoint(const std::string& path, GPT& model, optim::Optimizer& opt,
                              const apps::AmpRun* amp, const GPTConfig& cfg, const ByteVocab& vocab,
                              int64_t iter, const Options& o, int world_size,
                              std::map<std::string, std::string> meta);

// Checks that the file holds a GPT of the run's config and vocabulary (else throws naming the
// file and both configs), then restores model, optimizer and AMP state; returns the metadata
// (with "iter").
std::map<std::string, std::string> load_training_checkpoint(const std::string& path, GPT& model,
                                                            optim::Optimizer& opt,
                                                            apps::AmpRun* amp, bool main_rank,
                                                            const ByteVocab& vocab);

struct LoadedModel {
  std::shared_ptr<GPT> model;
  ByteVocab vocab;
  int64_t iter = 0;
};
// For sampling: builds the GPT from a checkpoint file (or a directory's newest) alone.
LoadedModel load_model(const std::string& file_or_dir, Device device);

}  // namespace gpt
