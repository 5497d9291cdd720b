// Checkpoint files of the training apps ("checkpoint-<unit>-N.safetensors" in --checkpoint-dir,
// only the newest kept, --resume FILE|DIR) and the Ctrl-C / SIGTERM stop request that lets a
// loop finish its step and keep the last complete checkpoint.
#pragma once
#include <cstdint>
#include <string>

namespace minidl::apps {

// dir/checkpoint-<unit>-<n>.safetensors; unit is "epoch" (mnist_ddp) or "iter" (gpt).
std::string checkpoint_path(const std::string& dir, const std::string& unit, int64_t n);
// --resume FILE, --resume DIR (that directory's newest complete checkpoint of `unit`) or
// --resume auto (DIR = checkpoint_dir, the run's --checkpoint-dir). Returns "" when DIR is
// missing or holds no checkpoint yet: the run starts from scratch, and `note` (if given) gets
// the line to print ("no checkpoint in DIR yet: starting from scratch"). Throws naming the path
// for a missing FILE (a name ending in .safetensors) and for `auto` without a checkpoint_dir.
std::string resolve_resume(const std::string& arg, const std::string& checkpoint_dir,
                           const std::string& unit, std::string* note = nullptr);
// After a complete checkpoint: tells minidl-run --max-restarts that a restart can resume
// (writes `path` to $MINIDL_PROGRESS_FILE when set; errors are ignored).
void note_checkpoint_written(const std::string& path);
// Removes the checkpoints of `unit` older than `keep` (after the newest is complete), with
// their FSDP shard directories.
void remove_older_checkpoints(const std::string& dir, const std::string& unit, int64_t keep);

// Installs SIGINT/SIGTERM handlers that ask the training loop to stop after the current step
// (a second signal terminates at once), and ignores SIGXFSZ (a write over `ulimit -f` fails).
void install_stop_handlers();
bool stop_requested();

}  // namespace minidl::apps
