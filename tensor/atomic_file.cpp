// write_file_atomic: temp file in the same directory + fwrite/fflush/fsync/close + rename over
// the target + fsync of the directory. Every failure removes the temp file and throws.
#include "tensor/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "tensor/error.h"

namespace minidl {
namespace {

// "... : No space left on device (errno 28, ENOSPC)": the message and the errno both.
[[noreturn]] void fail_errno(const std::string& path, const std::string& what, int err) {
  const char* name = ::strerrorname_np(err);
  MINIDL_FAIL("write_file_atomic: cannot write '", path, "': ", what, ": ", std::strerror(err),
              " (errno ", err, name ? ", " : "", name ? name : "", ")");
}

// A random-enough suffix; O_EXCL makes collisions harmless (we retry).
uint64_t random_suffix() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t seed = [] {
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ rd();
  }();
  uint64_t x = seed ^ uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) ^
               (counter.fetch_add(1) * 0x9e3779b97f4a7c15ull);
  x ^= x >> 31;  // splitmix-style finaliser
  x *= 0xbf58476d1ce4e5b9ull;
  return x ^ (x >> 29);
}

std::string parent_dir(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// Owns the temp file until it has been renamed: closes and unlinks it on failure.
struct TempFile {
  std::string name;
  FILE* f = nullptr;
  bool done = false;
  ~TempFile() {
    if (done) return;
    if (f) std::fclose(f);
    ::unlink(name.c_str());
  }
};

}  // namespace

void write_file_atomic(const std::string& path,
                       const std::function<void(const ByteSink&)>& produce) {
  MINIDL_CHECK(!path.empty(), "write_file_atomic: empty path");
  TempFile tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    char suffix[64];
    std::snprintf(suffix, sizeof(suffix), ".tmp.%ld.%016llx", long(::getpid()),
                  static_cast<unsigned long long>(random_suffix()));
    tmp.name = path + suffix;
    fd = ::open(tmp.name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && (errno != EEXIST || attempt >= 100)) {
      int err = errno;
      tmp.done = true;  // nothing was created
      fail_errno(path, "cannot create temporary file '" + tmp.name + "'", err);
    }
  }
  tmp.f = ::fdopen(fd, "wb");
  if (!tmp.f) {
    int err = errno;
    ::close(fd);
    fail_errno(path, "fdopen of '" + tmp.name + "' failed", err);
  }

  const ByteSink sink = [&](const void* data, size_t size) {
    if (size == 0) return;
    errno = 0;
    if (std::fwrite(data, 1, size, tmp.f) != size) {
      fail_errno(path, "write to '" + tmp.name + "' failed", errno ? errno : EIO);
    }
  };
  produce(sink);

  if (std::fflush(tmp.f) != 0) fail_errno(path, "flush of '" + tmp.name + "' failed", errno);
  // Keep the permissions of a file we replace (a new file gets 0666 & ~umask).
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    (void)::fchmod(fd, st.st_mode & 07777);
  }
  if (::fsync(fd) != 0) fail_errno(path, "fsync of '" + tmp.name + "' failed", errno);
  FILE* f = tmp.f;
  tmp.f = nullptr;
  if (std::fclose(f) != 0) fail_errno(path, "close of '" + tmp.name + "' failed", errno);
  if (std::rename(tmp.name.c_str(), path.c_str()) != 0) {
    fail_errno(path, "rename of '" + tmp.name + "' over it failed", errno);
  }
  tmp.done = true;

  // Make the rename itself durable. Some file systems cannot fsync directories (EINVAL).
  const std::string dir = parent_dir(path);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) fail_errno(path, "cannot open directory '" + dir + "' to fsync it", errno);
  if (::fsync(dfd) != 0 && errno != EINVAL && errno != ENOTSUP) {
    int err = errno;
    ::close(dfd);
    fail_errno(path, "fsync of directory '" + dir + "' failed", err);
  }
  ::close(dfd);
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  write_file_atomic(path, [&](const ByteSink& sink) { sink(bytes.data(), bytes.size()); });
}

}  // namespace minidl
