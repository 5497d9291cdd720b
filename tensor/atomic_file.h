// Crash-safe file writes: data goes to a temporary file in the target's directory, which is
// flushed, fsync'ed and renamed over the target (then the directory is fsync'ed), so readers
// see either the old or the new contents, never a torn file.
#pragma once
#include <cstddef>
#include <functional>
#include <string>

namespace minidl {

// Appends `size` bytes to the file being written; throws minidl::Error on I/O failure.
using ByteSink = std::function<void(const void* data, size_t size)>;

// Writes `bytes` to `path` atomically. On any failure the temporary file
// (`path + ".tmp.<pid>.<random>"`) is removed, `path` keeps its previous contents, and a
// minidl::Error naming the path, the temporary file, the failed step and the errno (text,
// number and name, e.g. "No space left on device (errno 28, ENOSPC)") is thrown. With a file
// size limit (RLIMIT_FSIZE) the caller must ignore SIGXFSZ to get EFBIG instead of a kill.
void write_file_atomic(const std::string& path, const std::string& bytes);

// Streaming variant: `produce(sink)` writes the contents through `sink`. An exception thrown
// by `produce` aborts the write (temporary file removed, target untouched) and propagates.
void write_file_atomic(const std::string& path,
                       const std::function<void(const ByteSink&)>& produce);

}  // namespace minidl
