// Checkpoint files of the training apps ("checkpoint-<unit>-N.safetensors" in --checkpoint-dir,
// only the newest kept, --resume FILE|DIR) and the Ctrl-C / SIGTERM stop request that lets a
// loop finish its step and keep the last complete checkpoint.
#pragma once
#include <cstdint>
#include <string>

namespace minidl::apps {

// dir/checkpoint-<unit>-<n>.safetensors; unit is "epoch" (mnist_ddp) or "iter" (gpt).
std::string checkpoint_path(const std::string& dir, const std::string& unit, int64_t n);
// --resume FILE, or --resume DIR: that directory's newest complete checkpoint of `unit`. Throws
// naming the path when it does not exist or holds none.
std::string resolve_resume(const std::string& arg, const std::string& unit);
// Removes the checkpoints of `unit` older than `keep` (after the newest is complete).
void remove_older_checkpoints(const std::string& dir, const std::string& unit, int64_t keep);

// Installs SIGINT/SIGTERM handlers that ask the training loop to stop after the current step
// (a second signal terminates at once), and ignores SIGXFSZ (a write over `ulimit -f` fails).
void install_stop_handlers();
bool stop_requested();

}  // namespace minidl::apps
