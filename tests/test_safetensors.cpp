// safetensors I/O: round trips of every dtype, byte-exact layouts, every header corruption,
// lazy reads, validation before a save touches the file, and interop with an independent Python
// implementation (tools/safetensors_interop.py). Atomic writes: test_atomic_file.cpp.
#include "safetensors_test_util.h"
#include "skip.h"

TEST_SUITE("safetensors") {
  TEST_CASE("safetensors: round trip of every dtype (0-d, zero-size, non-contiguous)") {
    const Shape shapes[] = {{2, 3}, {}, {0, 3}, {7}, {2, 1, 4}, {3, 0}};
    uint64_t seed = 10;
    for (DType dt : kAllDTypes) {
      for (const Shape& shape : shapes) {
        CAPTURE(dt);
        CAPTURE(shape_str(shape));
        Tensor t = random_tensor(shape, dt, ++seed, -50, 50);
        std::map<std::string, Tensor> m{{"t", t}, {"nc", testutil::noncontiguous(t)}};
        if (t.dim() >= 2) m["tr"] = t.transpose(0, 1);
        SafetensorsMetadata meta{{"junk", "x"}};
        auto loaded = load_safetensors_bytes(save_safetensors_bytes(m), &meta);
        CHECK(meta.empty());  // overwritten: the file has no metadata
        REQUIRE(loaded.size() == m.size());
        for (const auto& [name, src] : m) {
          const Tensor& got = loaded.at(name);
          CHECK(got.dtype() == dt);
          CHECK(got.shape() == src.shape());
          CHECK(got.is_contiguous());
          CHECK(raw(got) == raw(src));
        }
      }
    }
  }

  TEST_CASE("safetensors: special float values survive bit-exactly in a file round trip") {
    const std::vector<double> v = {0.0, -0.0, 1.0 / 0.0, -1.0 / 0.0, std::nan(""), 1e-40, 65504};
    std::map<std::string, Tensor> m;
    for (DType dt : {kFloat64, kFloat32, kFloat16, kBFloat16}) {
      m[std::string(dtype_name(dt))] = from_f64(v, {7}, dt);
    }
    m["i64"] = from_f64({-9007199254740992.0, 9007199254740992.0}, {2}, kInt64);
    TempDir dir;
    const std::string path = (dir.path / "special.safetensors").string();
    save_safetensors(m, path, {{"k", "v"}});
    SafetensorsMetadata meta;
    auto loaded = load_safetensors(path, &meta);
    CHECK(meta == SafetensorsMetadata{{"k", "v"}});
    REQUIRE(loaded.size() == m.size());
    for (const auto& [name, t] : m) CHECK(raw(loaded.at(name)) == raw(t));
    CHECK(dir.temp_files() == 0);
  }

  TEST_CASE("safetensors: metadata round trip (unicode, escapes, empty strings)") {
    SafetensorsMetadata meta{{"format", "pt"},
                             {"unicode", "h\xc3\xa9llo \xe2\x9c\x93"},
                             {"esc \"q\" \\", "line1\nline2\ttab\x01"},
                             {"", ""}};
    SafetensorsMetadata got;
    auto loaded = load_safetensors_bytes(save_safetensors_bytes({}, meta), &got);
    CHECK(loaded.empty());
    CHECK(got == meta);
    // Tensor names need not be ASCII either.
    auto t =
        load_safetensors_bytes(save_safetensors_bytes({{"w\xc3\xa9ight", from_f64({1}, {1})}}));
    CHECK(t.count("w\xc3\xa9ight") == 1);
  }

  TEST_CASE("safetensors: byte-exact layout (the reference implementation's vectors)") {
    // One f32 [1,2,3] tensor: a 64-byte header needs no padding.
    const std::string h1 = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
    REQUIRE(h1.size() == 64);
    const std::string d1 = bytes_of(std::vector<float>{0, 1, 2, 3, 4, 5});
    Tensor a = from_f64({0, 1, 2, 3, 4, 5}, {1, 2, 3});
    CHECK(save_safetensors_bytes({{"attn.0", a}}) == image(h1, d1));
    // First bytes spelled out: N = 64 little-endian, then '{'.
    const std::string out = save_safetensors_bytes({{"attn.0", a}});
    CHECK(out.substr(0, 9) == std::string("\x40\0\0\0\0\0\0\0{", 9));

    // No tensors: "{}" padded to 8 bytes; metadata only: 35 bytes padded to 40.
    CHECK(save_safetensors_bytes({}) == image("{}      "));
    CHECK(save_safetensors_bytes({}, {{"framework", "pt"}}) ==
          image(R"({"__metadata__":{"framework":"pt"}})" + std::string(5, ' ')));

    // Two tensors: packed in name order (not insertion order), header padded with spaces.
    const std::string h2 = R"({"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},)"
                           R"("b":{"dtype":"I32","shape":[2],"data_offsets":[3,11]}})";
    REQUIRE(h2.size() == 107);
    const std::string d2 = std::string("\x07\x08\x09") + bytes_of(std::vector<int32_t>{1, -2});
    auto two = save_safetensors_bytes(
        {{"b", from_f64({1, -2}, {2}, kInt32)}, {"a", from_f64({7, 8, 9}, {3}, kUInt8)}});
    CHECK(two == image(h2 + std::string(5, ' '), d2));
    CHECK(two.size() == 8 + 112 + 11);
  }

  TEST_CASE("safetensors: reader accepts any tensor order, whitespace, null metadata") {
    const std::string header = R"( {"b": {"data_offsets": [4, 8], "shape": [1], "dtype": "F32"},
        "z": {"dtype": "I64", "shape": [0, 5], "data_offsets": [8, 8]},
        "__metadata__": null,
        "a": {"dtype": "F32", "shape": [], "data_offsets": [0, 4], "extra": 1} }   )";
    // A leading space is not allowed by the reference reader; without it the file is fine.
    const std::string data = bytes_of(std::vector<float>{1.5f, -2.5f});
    expect_load_error(image(header, data), {"must be a JSON object starting with '{'"});
    SafetensorsMetadata meta{{"x", "y"}};
    auto t = load_safetensors_bytes(image(header.substr(1), data), &meta);
    CHECK(meta.empty());
    REQUIRE(t.size() == 3);
    CHECK(t.at("a").dim() == 0);
    CHECK(t.at("a").item<double>() == 1.5);
    CHECK(testutil::to_f64(t.at("b")) == std::vector<double>{-2.5});
    CHECK(t.at("z").shape() == Shape{0, 5});
    // bool bytes other than 0/1 load as true.
    auto b =
        load_safetensors_bytes(image(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})",
                                     std::string("\x00\x02\xff", 3)));
    CHECK(testutil::to_f64(b.at("m")) == std::vector<double>{0, 1, 1});
  }

  TEST_CASE("safetensors: every kind of corruption is a clear error") {
    const std::string f4 = bytes_of(std::vector<float>{1, 2});
    // Header {"name": {body}, ...} from (name, body) pairs (built with += : gcc 12 gives a
    // false -Wrestrict on chains of string operator+).
    auto obj = [](std::initializer_list<std::pair<const char*, const char*>> entries) {
      std::string h = "{";
      for (const auto& [name, body] : entries) {
        if (h.size() > 1) h += ',';
        h += '"';
        h += name;
        h += "\":{";
        h += body;
        h += '}';
      }
      h += '}';
      return h;
    };
    auto one = [&](const std::string& body) { return obj({{"x", body.c_str()}}); };

    // Size field and framing.
    expect_load_error("", {"too short (0 bytes)"});
    expect_load_error(std::string("\x02\0\0\0", 4), {"too short (4 bytes)"});
    expect_load_error(le64(100'000'001) + "{}", {"exceeds the limit of 100000000"});
    expect_load_error(le64(~uint64_t(0)) + "{}", {"exceeds the limit"});
    expect_load_error(le64(40) + "{}", {"header size 40 exceeds the 2 bytes"});
    // JSON syntax and structure.
    expect_load_error(image("{\"x\":"), {"invalid JSON header"});
    expect_load_error(image("[1, 2]"), {"starting with '{'"});
    expect_load_error(image("{} {}"), {"invalid JSON header"});
    expect_load_error(image(std::string("{}\0\0", 4)) /*NUL padding*/, {"NUL byte"});
    expect_load_error(image("{\"\xff\":1}"), {"invalid JSON header"});  // not UTF-8
    expect_load_error(image(R"({"x":{"shape":[[[1]]]}})"), {"nested too deeply"});
    expect_load_error(image(R"({"x":[1]})"), {"tensor 'x'", "must be an object"});
    expect_load_error(image(one(R"("shape":[2],"data_offsets":[0,8])"), f4),
                      {"tensor 'x'", "missing field 'dtype'"});
    expect_load_error(image(one(R"("dtype":"F32","data_offsets":[0,8])"), f4),
                      {"missing field 'shape'"});
    expect_load_error(image(one(R"("dtype":"F32","shape":[2])"), f4),
                      {"missing field 'data_offsets'"});
    expect_load_error(image(one(R"("dtype":7,"shape":[2],"data_offsets":[0,8])"), f4),
                      {"tensor 'x'", "dtype must be a string"});
    expect_load_error(image(one(R"("dtype":"F32","shape":2,"data_offsets":[0,8])"), f4),
                      {"shape must be an array"});
    expect_load_error(image(one(R"("dtype":"F32","shape":[2.0],"data_offsets":[0,8])"), f4),
                      {"shape entry must be a non-negative integer"});
    expect_load_error(image(one(R"("dtype":"F32","shape":["2"],"data_offsets":[0,8])"), f4),
                      {"shape entry must be a non-negative integer"});
    expect_load_error(image(one(R"("dtype":"F32","shape":[2],"data_offsets":[0,8,8])"), f4),
                      {"data_offsets must be an array [begin, end]"});
    expect_load_error(image(one(R"("dtype":"F32","shape":[2],"data_offsets":{"a":0})"), f4),
                      {"data_offsets must be an array"});
    expect_load_error(image(one(R"("dtype":"F32","shape":[2],"data_offsets":[-8,0])"), f4),
                      {"data_offsets begin must be a non-negative integer"});
    expect_load_error(image(R"({"__metadata__":[1]})"), {"__metadata__ must be an object"});
    expect_load_error(image(R"({"__metadata__":{"k":1}})"), {"value of 'k' must be a string"});
    // dtypes: valid in the format but unsupported, and unknown.
    for (const char* dt : {"I8", "I16", "U16", "U32", "U64", "F8_E4M3", "F8_E5M2"}) {
      const std::string body =
          std::string(R"("dtype":")") + dt + R"(","shape":[0],"data_offsets":[0,0])";
      expect_load_error(image(one(body)), {"tensor 'x'", dt, "not supported"});
    }
    expect_load_error(image(one(R"("dtype":"f32","shape":[2],"data_offsets":[0,8])"), f4),
                      {"tensor 'x'", "unknown dtype 'f32'"});
    // Shapes.
    expect_load_error(image(one(R"("dtype":"F32","shape":[-2],"data_offsets":[0,8])"), f4),
                      {"tensor 'x'", "non-negative"});
    expect_load_error(
        image(one(R"("dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0])")),
        {"tensor 'x'", "overflows the element count"});
    expect_load_error(
        image(one(R"("dtype":"U8","shape":[0,4611686018427387904,4],"data_offsets":[0,0])")),
        {"overflows the element count"});
    expect_load_error(
        image(one(R"("dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0])")),
        {"overflows the byte count"});
    expect_load_error(
        image(one(R"("dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,0])")),
        {"non-negative integer"});
    // Offsets.
    expect_load_error(image(one(R"("dtype":"F32","shape":[3],"data_offsets":[0,8])"), f4),
                      {"tensor 'x'", "span 8 bytes", "needs 12"});
    expect_load_error(image(one(R"("dtype":"F32","shape":[2],"data_offsets":[8,0])"), f4),
                      {"tensor 'x'", "end before begin"});
    expect_load_error(image(one(R"("dtype":"F32","shape":[2],"data_offsets":[4,12])"), f4),
                      {"tensor 'x'", "out of the data buffer (8 bytes)"});
    const std::string d12 = bytes_of(std::vector<float>{1, 2, 3});
    const std::string ov = obj({{"p", R"("dtype":"F32","shape":[2],"data_offsets":[0,8])"},
                                {"q", R"("dtype":"F32","shape":[2],"data_offsets":[4,12])"}});
    expect_load_error(image(ov, d12), {"tensor 'q'", "overlap tensor 'p'"});
    const std::string hole = obj({{"p", R"("dtype":"F32","shape":[1],"data_offsets":[0,4])"},
                                  {"q", R"("dtype":"F32","shape":[1],"data_offsets":[8,12])"}});
    expect_load_error(image(hole, d12), {"tensor 'q'", "hole of 4 bytes"});
    expect_load_error(image(one(R"("dtype":"F32","shape":[2],"data_offsets":[0,8])"), f4 + "!"),
                      {"tensors cover 8 bytes but the data buffer has 9", "trailing"});
    expect_load_error(image("{}", "x"), {"trailing"});
    // Duplicates.
    const std::string dup = obj({{"x", R"("dtype":"U8","shape":[0],"data_offsets":[0,0])"},
                                 {"x", R"("dtype":"U8","shape":[0],"data_offsets":[0,0])"}});
    expect_load_error(image(dup), {"duplicate tensor name 'x'"});
    expect_load_error(image(one(R"("dtype":"U8","dtype":"U8","shape":[0],"data_offsets":[0,0])")),
                      {"duplicate key 'dtype'"});
    expect_load_error(image(R"({"__metadata__":{"a":"1","a":"2"}})"), {"duplicate key 'a'"});
  }

  TEST_CASE("safetensors: SafetensorsFile reads the header lazily") {
    TempDir dir;
    const std::string path = (dir.path / "lazy.safetensors").string();
    Tensor w = random_tensor({3, 4}, kFloat32, 7), b = random_tensor({4}, kBFloat16, 8);
    save_safetensors({{"w", w}, {"b", b}}, path, {{"step", "12"}});
    SafetensorsFile f(path);
    CHECK(f.names() == std::vector<std::string>{"b", "w"});
    CHECK(f.size() == 2);
    CHECK(f.contains("w"));
    CHECK(!f.contains("x"));
    CHECK(f.metadata() == SafetensorsMetadata{{"step", "12"}});
    const SafetensorsEntry& e = f.info("w");
    CHECK(e.dtype == kFloat32);
    CHECK(e.shape == Shape{3, 4});
    CHECK(e.begin == 8);  // "b" (8 bytes of bf16) comes first
    CHECK(e.end == 56);
    CHECK(raw(f.get("w")) == raw(w));
    CHECK(raw(f.get("b")) == raw(b));
    CHECK_THROWS_WITH_AS(f.info("x"), doctest::Contains("no tensor named 'x'"), Error);
    CHECK_THROWS_WITH_AS(f.get("x"), doctest::Contains(path.c_str()), Error);
    auto all = f.load_all();
    CHECK(all.size() == 2);
    CHECK(raw(all.at("w")) == raw(w));
    // The file shrinking after the header was read: an error naming the tensor.
    std::string bytes = read_file(path);
    write_file(path, bytes.substr(0, bytes.size() - 4));
    CHECK_THROWS_WITH_AS(f.get("w"), doctest::Contains("tensor 'w': read of 48 bytes failed"),
                         Error);
  }

  TEST_CASE("safetensors: file-level errors name the file") {
    TempDir dir;
    const std::string missing = (dir.path / "missing.safetensors").string();
    CHECK_THROWS_WITH_AS(load_safetensors(missing), doctest::Contains(missing.c_str()), Error);
    CHECK_THROWS_WITH_AS(load_safetensors(dir.path.string()), doctest::Contains(dir.path.c_str()),
                         Error);
    const std::string good = sample_image();
    const std::string trunc = (dir.path / "trunc.safetensors").string();
    for (size_t len : {size_t(0), size_t(5), size_t(20), good.size() - 1}) {
      write_file(trunc, good.substr(0, len));
      std::string msg = error_of([&] { load_safetensors(trunc); });
      CHECK_MESSAGE(msg.find("safetensors: '" + trunc + "'") == 0, msg);
    }
    write_file(trunc, good);
    CHECK(load_safetensors(trunc).size() == 5);
  }

  TEST_CASE("safetensors: save validates before touching the file") {
    TempDir dir;
    const std::string path = (dir.path / "keep.safetensors").string();
    write_file(path, "old contents");
    Tensor x = from_f64({1, 2}, {2});
    CHECK_THROWS_WITH_AS(save_safetensors({{"x", x}, {"u", Tensor()}}, path),
                         doctest::Contains("tensor 'u' is undefined"), Error);
    CHECK_THROWS_WITH_AS(save_safetensors({{"__metadata__", x}}, path),
                         doctest::Contains("'__metadata__' is reserved"), Error);
    CHECK_THROWS_WITH_AS(save_safetensors({{"bad\xff", x}}, path), doctest::Contains("valid UTF-8"),
                         Error);
    CHECK_THROWS_WITH_AS(save_safetensors({{"x", x}}, path, {{"k", "\xc3"}}),
                         doctest::Contains(path.c_str()), Error);
    CHECK(read_file(path) == "old contents");
    CHECK(dir.temp_files() == 0);
  }

  TEST_CASE("safetensors: interop with an independent Python implementation") {
    if (std::system("python3 -c 'import json, struct' > /dev/null 2>&1") != 0) {
      MINIDL_SKIP("python3 not found (the interop script needs it)");
    }
    const std::string script = MINIDL_TEST_DATA_DIR "/../../tools/safetensors_interop.py";
    REQUIRE(fs::exists(script));
    TempDir dir;
    const std::string from_py = (dir.path / "from_python.safetensors").string();
    const std::string from_cpp = (dir.path / "from_minidl.safetensors").string();
    // The reference contents (see the script's docstring).
    std::map<std::string, Tensor> ref{{"a", from_f64({0, 1, 2, 3, 4, 5}, {2, 3}, kFloat32)},
                                      {"b", from_f64({-1, 0, 1, 1099511627776.0}, {4}, kInt64)},
                                      {"c", from_f64({0.5, -2}, {2}, kFloat16)},
                                      {"d", from_f64({1, 0, 1}, {3}, kBool)},
                                      {"e", from_f64({1.5}, {1}, kBFloat16)}};

    // Python -> minidl.
    REQUIRE(std::system(("python3 '" + script + "' write '" + from_py + "'").c_str()) == 0);
    SafetensorsMetadata meta;
    auto got = load_safetensors(from_py, &meta);
    CHECK(meta == SafetensorsMetadata{{"format", "pt"}});
    REQUIRE(got.size() == ref.size());
    for (const auto& [name, t] : ref) {
      CAPTURE(name);
      CHECK(got.at(name).dtype() == t.dtype());
      CHECK(got.at(name).shape() == t.shape());
      CHECK(testutil::to_f64(got.at(name)) == testutil::to_f64(t));
    }
    // minidl -> Python (validated per spec, values checked, byte-identical to Python's file).
    save_safetensors(ref, from_cpp, {{"format", "pt"}});
    CHECK(std::system(("python3 '" + script + "' check '" + from_cpp + "'").c_str()) == 0);
    CHECK(read_file(from_cpp) == read_file(from_py));
    // The checker is not vacuous: a different value fails it.
    ref["a"] = from_f64({0, 1, 2, 3, 4, 6}, {2, 3}, kFloat32);
    save_safetensors(ref, from_cpp, {{"format", "pt"}});
    CHECK(std::system(("python3 '" + script + "' check '" + from_cpp + "' 2>/dev/null").c_str()) !=
          0);
  }
}

#ifdef MINIDL_TEST_WITH_CUDA
TEST_SUITE("cuda") {
  TEST_CASE("cuda: save_safetensors copies device tensors to the host") {
    Tensor t = random_tensor({3, 5}, kFloat32, 3);
    auto loaded = load_safetensors_bytes(
        save_safetensors_bytes({{"g", t.cuda()}, {"gt", t.cuda().transpose(0, 1)}}));
    CHECK(raw(loaded.at("g")) == raw(t));
    CHECK(raw(loaded.at("gt")) == raw(t.transpose(0, 1)));
  }
}
#endif
