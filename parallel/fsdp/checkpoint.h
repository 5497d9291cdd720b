// FSDP checkpoints. Sharded: every rank writes its own shards (and its optimizer's state for
// them) to DIR/shard-<rank>-of-<world>.safetensors through the atomic writer; loading reads
// the files of any earlier world size and cuts this rank's shards out of them, so 2 ranks can
// resume on 3 or on 1. Full: load_full_state_dict takes a plain model's state dict (the names
// full_state_dict() gives, e.g. a file written by nn::save_weights).
#pragma once
#include <string>

#include "optim/optimizer.h"
#include "parallel/fsdp/fsdp.h"

namespace minidl::dist {

// Collective. `opt` (may be null) must step fsdp.parameters() in order, in any param groups.
// The directory is created; the call returns on every rank once every file is complete.
void save_sharded_checkpoint(const std::string& dir, FullyShardedDataParallel& fsdp,
                             const optim::Optimizer* opt = nullptr);
// Collective. Errors name the directory, the file and the unit when the files are missing,
// from another model or incomplete; nothing is changed on an error.
void load_sharded_checkpoint(const std::string& dir, FullyShardedDataParallel& fsdp,
                             optim::Optimizer* opt = nullptr);

// Every rank passes the same full state dict (parameters by their names in the wrapped model,
// buffers too); each keeps its own shards. Errors name missing keys and wrong shapes.
void load_full_state_dict(FullyShardedDataParallel& fsdp, const nn::StateDict& state);

}  // namespace minidl::dist
