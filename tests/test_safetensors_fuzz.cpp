// safetensors fuzzing: truncation at every length, seeded bit flips, rewritten header sizes
// and random near-valid headers must load consistently or throw minidl::Error, never crash.
#include "safetensors_test_util.h"

TEST_SUITE("safetensors") {
  TEST_CASE("safetensors: fuzzing (truncation, bit flips, header sizes, token soup)") {
    const std::string good = sample_image();
    SafetensorsMetadata meta;
    auto ref = load_safetensors_bytes(good, &meta);
    REQUIRE(ref.size() == 5);
    CHECK(meta == SafetensorsMetadata{{"format", "pt"}});
    uint64_t data_start = 0;
    std::memcpy(&data_start, good.data(), 8);
    data_start += 8;

    // Every truncation (and one extra byte) is an error.
    int truncation_failures = 0;
    for (size_t len = 0; len < good.size(); ++len) {
      std::string msg = error_of([&] { load_safetensors_bytes(good.substr(0, len)); });
      truncation_failures += msg.rfind("safetensors: '<memory>'", 0) != 0;
    }
    CHECK(truncation_failures == 0);
    CHECK(error_of([&] { load_safetensors_bytes(good + '\0'); }).find("trailing") !=
          std::string::npos);

    // Random bit flips: an Error or a successful load; flips only in the data region load
    // fine, with exactly the flipped bytes.
    std::mt19937_64 rng(1234);
    int other_exceptions = 0, data_loads = 0, header_errors = 0;
    for (int iter = 0; iter < 400; ++iter) {
      std::string bad = good;
      const bool data_only = iter % 4 == 0;
      const int flips = 1 + int(rng() % 3);
      for (int k = 0; k < flips; ++k) {
        size_t pos =
            data_only ? data_start + rng() % (good.size() - data_start) : rng() % good.size();
        bad[pos] = char(bad[pos] ^ (1 << (rng() % 8)));
      }
      std::map<std::string, Tensor> got;
      std::string msg = error_of([&] { got = load_safetensors_bytes(bad); });
      if (msg == "<no exception>") {
        if (data_only) {
          ++data_loads;
          REQUIRE(got.size() == ref.size());
          std::string payload, expected = bad.substr(data_start);
          size_t off = 0;
          for (const auto& [name, t] : got) {  // name order = file order
            payload += raw(t);
            if (t.dtype() == kBool) {  // bool bytes load normalised to 0/1
              for (int64_t i = 0; i < t.numel(); ++i) {
                expected[off + size_t(i)] = char(expected[off + size_t(i)] != 0);
              }
            }
            off += t.nbytes();
          }
          CHECK(payload == expected);
        }
      } else if (msg.rfind("safetensors: '<memory>'", 0) != 0) {
        ++other_exceptions;
        MESSAGE("unexpected failure: ", msg);
      } else {
        header_errors += !data_only;
      }
    }
    CHECK(other_exceptions == 0);
    CHECK(data_loads == 100);  // every data-only mutation loads
    CHECK(header_errors > 100);

    // Header size field rewritten.
    for (uint64_t n : {uint64_t(0), uint64_t(1), uint64_t(good.size() - 7), uint64_t(1) << 63,
                       ~uint64_t(0), uint64_t(100'000'001)}) {
      std::string bad = le64(n) + good.substr(8);
      CHECK_THROWS_AS(load_safetensors_bytes(bad), Error);
    }

    // Random near-valid headers: 1-3 entries with random dtypes, shapes and offsets over a
    // random-size data buffer. Each either loads consistently or is an Error.
    const std::pair<const char*, uint64_t> dtypes[] = {
        {"F32", 4}, {"F16", 2}, {"I64", 8}, {"U8", 1}, {"BOOL", 1}, {"I8", 1}, {"X", 1}};
    const char* odd_dims[] = {"-1", "4294967296", "1.0", "\"2\""};
    int random_loads = 0;
    for (int iter = 0; iter < 600; ++iter) {
      std::ostringstream os;
      os << '{';
      const int n = 1 + int(rng() % 3);
      uint64_t off = 0;
      for (int k = 0; k < n; ++k) {
        const auto& [dtype, size] = dtypes[rng() % (rng() % 4 == 0 ? std::size(dtypes) : 5)];
        os << (k ? "," : "") << "\"t" << rng() % 4 << "\":{\"dtype\":\"" << dtype
           << "\",\"shape\":[";
        const size_t nd = rng() % 3;
        uint64_t numel = 1;
        for (size_t d = 0; d < nd; ++d) {
          os << (d ? "," : "");
          if (rng() % 16 == 0) {
            os << odd_dims[rng() % std::size(odd_dims)];
          } else {
            const uint64_t dim = rng() % 4;
            numel *= dim;
            os << dim;
          }
        }
        const uint64_t len = rng() % 8 == 0 ? rng() % 10 : numel * size;
        const uint64_t begin = rng() % 8 == 0 ? rng() % 12 : off;
        os << "],\"data_offsets\":[" << begin << "," << begin + len << "]}";
        off = begin + len;
      }
      os << '}';
      const std::string h = os.str();
      const size_t data_size = rng() % 8 == 0 ? rng() % 16 : off;
      std::map<std::string, Tensor> got;
      std::string msg =
          error_of([&] { got = load_safetensors_bytes(image(h, std::string(data_size, '\1'))); });
      if (msg == "<no exception>") {
        ++random_loads;
        size_t total = 0;
        for (const auto& [name, t] : got) total += t.nbytes();
        CHECK_MESSAGE(total == data_size, h);
      } else {
        CHECK_MESSAGE(msg.rfind("safetensors: '<memory>'", 0) == 0, msg);
      }
    }
    CHECK(random_loads > 10);  // the generator does reach valid files
    MESSAGE("random headers: ", random_loads, " of 600 were valid");
  }
}
