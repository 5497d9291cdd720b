// write_file_atomic (tensor/atomic_file.h), the crash-safe writes under checkpoints and
// safetensors files: a write replaces the file whole and keeps its permissions; a producer that
// throws, a directory target, a missing or read-only directory leave the old file, no temp file.
#include "safetensors_test_util.h"

TEST_SUITE("safetensors") {
  TEST_CASE("atomic_file: writes, replaces and cleans up on failure") {
    TempDir dir;
    const std::string path = (dir.path / "f.bin").string();
    write_file_atomic(path, std::string("first"));
    CHECK(read_file(path) == "first");
    ::chmod(path.c_str(), 0640);
    write_file_atomic(path, std::string("second\0version", 14));
    CHECK(read_file(path) == std::string("second\0version", 14));
    struct stat st;
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0640);  // permissions of the replaced file are kept
    CHECK(dir.temp_files() == 0);

    // The producer fails half-way: the target keeps its old contents, no temp file remains.
    CHECK_THROWS_WITH_AS(write_file_atomic(path,
                                           [](const ByteSink& sink) {
                                             sink("partial", 7);
                                             throw Error("producer failed");
                                           }),
                         doctest::Contains("producer failed"), Error);
    CHECK(read_file(path) == std::string("second\0version", 14));
    CHECK(dir.temp_files() == 0);

    // The target is a directory: rename fails, the directory is untouched.
    const fs::path sub = dir.path / "sub";
    fs::create_directory(sub);
    write_file(sub / "inner", "x");
    CHECK_THROWS_WITH_AS(write_file_atomic(sub.string(), std::string("data")),
                         doctest::Contains("Is a directory"), Error);
    CHECK(fs::is_directory(sub));
    CHECK(read_file(sub / "inner") == "x");
    CHECK(dir.temp_files() == 0);

    // The directory does not exist: names the path and strerror.
    const std::string nowhere = (dir.path / "no" / "such" / "f.bin").string();
    std::string msg = error_of([&] { write_file_atomic(nowhere, std::string("x")); });
    CHECK_MESSAGE(msg.find(nowhere) != std::string::npos, msg);
    CHECK_MESSAGE(msg.find("No such file or directory") != std::string::npos, msg);

    // A read-only directory (permissions are not enforced for root).
    if (::geteuid() != 0) {
      const fs::path ro = dir.path / "ro";
      fs::create_directory(ro);
      write_file(ro / "f.bin", "old");
      ::chmod(ro.c_str(), 0555);
      msg = error_of([&] { write_file_atomic((ro / "f.bin").string(), std::string("new")); });
      CHECK_MESSAGE(msg.find("Permission denied") != std::string::npos, msg);
      ::chmod(ro.c_str(), 0755);
      CHECK(read_file(ro / "f.bin") == "old");
    } else {
      MESSAGE("running as root: read-only directory case skipped");
    }

    // A failing save_safetensors (tensor copy throws mid-write) keeps the old file too.
    const std::string mpath = (dir.path / "m.safetensors").string();
    save_safetensors({{"a", from_f64({1}, {1})}}, mpath);
    const std::string before = read_file(mpath);
    CHECK_THROWS_AS(write_file_atomic(mpath,
                                      [&](const ByteSink& sink) {
                                        sink(before.data(), 10);
                                        from_f64({1}, {1}).data_ptr<double>();  // wrong dtype
                                      }),
                    Error);
    CHECK(read_file(mpath) == before);
    CHECK(dir.temp_files() == 0);
  }
}
