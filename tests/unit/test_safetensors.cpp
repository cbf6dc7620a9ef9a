// safetensors reader/writer tests: a file assembled byte by byte from the format's definition,
// writer round trips (single and sharded), dtype widening on load, and one clear error for each
// kind of malformed file, naming the file and the tensor.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/safetensors.h"
#include "test_util.h"
#include "vk/error.h"

namespace vkf {
namespace {
namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("vkf_st_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A file with the given header text (padded to 8) followed by `data`.
  std::string raw_file(const std::string& name, const std::string& header,
                       const std::vector<uint8_t>& data, int64_t header_len_override = -1) {
    std::string h = header;
    while (h.size() % 8) h.push_back(' ');
    const uint64_t len =
        header_len_override >= 0 ? static_cast<uint64_t>(header_len_override) : h.size();
    std::ofstream out(path(name), std::ios::binary);
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(len >> (8 * i)));
    out << h;
    out.write(reinterpret_cast<const char*>(data.data()),
              static_cast<std::streamsize>(data.size()));
    return path(name);
  }

  void expect_error(const std::string& file, const std::vector<std::string>& parts) {
    try {
      io::SafetensorsFile f(file);
      FAIL() << "no error for " << file;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(file), std::string::npos) << msg;
      for (const auto& p : parts)
        EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    }
  }

  fs::path dir_;
};

std::vector<uint8_t> floats(std::initializer_list<float> v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.begin(), b.size());
  return b;
}

TEST_F(SafetensorsTest, ReadsAHandMadeFile) {
  std::vector<uint8_t> data = floats({1, 2, 3, 4, 5, 6});
  const uint16_t h[2] = {f32_to_f16_bits(0.5f), f32_to_f16_bits(-2.0f)};
  const uint16_t b[2] = {f32_to_bf16_bits(3.0f), f32_to_bf16_bits(0.25f)};
  const int64_t ids[3] = {7, -1, 1ll << 40};
  auto append = [&](const void* p, size_t n) {
    data.insert(data.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  };
  append(h, 4);
  append(b, 4);
  append(ids, 24);
  const std::string file = raw_file(
      "a.safetensors",
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("h":{"dtype":"F16","shape":[2],"data_offsets":[24,28]},)"
      R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[28,32]},)"
      R"("i":{"dtype":"I64","shape":[3],"data_offsets":[32,56]}})",
      data);
  io::SafetensorsFile f(file);
  EXPECT_EQ(f.metadata()["format"], "pt");
  ASSERT_EQ(f.entries().size(), 4u);
  EXPECT_EQ(f.load("w").to_double(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(f.load("w").shape(), (Shape{2, 3}));
  Tensor hf = f.load("h");
  EXPECT_EQ(hf.dtype(), DType::F32);
  EXPECT_EQ(hf.to_double(), (std::vector<double>{0.5, -2.0}));
  EXPECT_EQ(f.load("b").to_double(), (std::vector<double>{3.0, 0.25}));
  EXPECT_EQ(f.load("h", DType::F16).dtype(), DType::F16);
  EXPECT_EQ(f.load("i").to_int(), (std::vector<int64_t>{7, -1, 1ll << 40}));
  EXPECT_THROW(f.at("missing"), Error);
}

TEST_F(SafetensorsTest, WriterRoundTripsAndPadsHeader) {
  test::Rng rng(5);
  const auto a = test::as_f32(rng.uniform(35));
  Tensor t = test::to_gpu(a, {5, 7});
  std::vector<io::WriteTensor> ws = {
      io::to_write_tensor("model.embed.weight", t),
      io::to_write_tensor("x.bf16", t.to(DType::BF16)),
      io::to_write_tensor("ids", Tensor::from_host_i64(std::vector<int64_t>{3, 4}, {2}))};
  const std::string p = path("m.safetensors");
  io::write_safetensors(p, ws);
  // Header length is a multiple of 8 and the data follows it directly.
  std::ifstream in(p, std::ios::binary);
  uint8_t len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | len_bytes[i];
  EXPECT_EQ(len % 8, 0u);
  EXPECT_EQ(fs::file_size(p), 8 + len + 35 * 4 + 35 * 2 + 16);
  io::SafetensorsFile f(p);
  EXPECT_EQ(f.metadata()["format"], "pt");
  EXPECT_EQ(f.load("model.embed.weight").to_double(), a);
  EXPECT_EQ(f.load("x.bf16", DType::BF16).to_bytes(), t.to(DType::BF16).to_bytes());
  EXPECT_EQ(f.load("ids").to_int(), (std::vector<int64_t>{3, 4}));
  // Tensors are laid out contiguously in the order given.
  EXPECT_EQ(f.at("model.embed.weight").begin, 0u);
  EXPECT_EQ(f.at("x.bf16").begin, 140u);
  // No temporary file is left beside the result.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST_F(SafetensorsTest, ShardedWithIndex) {
  std::vector<io::WriteTensor> ws;
  for (int i = 0; i < 5; ++i) {
    ws.push_back(
        io::to_write_tensor("t" + std::to_string(i), Tensor::full({100}, static_cast<float>(i))));
  }
  const auto files = io::write_sharded(dir_.string(), ws, 900);  // 400 bytes each: 2 per shard
  ASSERT_EQ(files.size(), 4u);
  EXPECT_EQ(files[0], "model-00001-of-00003.safetensors");
  EXPECT_EQ(files[3], "model.safetensors.index.json");
  std::ifstream in(path("model.safetensors.index.json"));
  const auto index = nlohmann::json::parse(in);
  EXPECT_EQ(index["metadata"]["total_size"], 2000);
  EXPECT_EQ(index["weight_map"]["t4"], "model-00003-of-00003.safetensors");
  io::SafetensorsModel m(dir_.string());
  EXPECT_EQ(m.names().size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(m.load("t" + std::to_string(i)).to_double(), std::vector<double>(100, i));
  }
  // A single small model is one file without an index.
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  EXPECT_EQ(io::write_sharded(dir_.string(), ws, 1 << 20),
            std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(io::SafetensorsModel(dir_.string()).names().size(), 5u);
}

TEST_F(SafetensorsTest, MalformedFilesGiveClearErrors) {
  const auto d24 = floats({1, 2, 3, 4, 5, 6});
  const std::string ok = R"("w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})";
  {
    std::ofstream(path("tiny.safetensors")) << "abc";
    expect_error(path("tiny.safetensors"), {"too short"});
  }
  expect_error(raw_file("len.safetensors", "{" + ok + "}", d24, 1 << 20),
               {"header length", "runs past the end"});
  expect_error(raw_file("json.safetensors", "{\"w\": [1,2", d24), {"not valid JSON"});
  expect_error(raw_file("dtype.safetensors",
                        R"({"w":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", d24),
               {"'w'", "F8_E4M3", "does not read"});
  expect_error(
      raw_file("past.safetensors", R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})",
               floats({1, 2, 3})),
      {"'w'", "run past the data section", "truncated"});
  expect_error(raw_file("size.safetensors",
                        R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,24]}})", d24),
               {"'w'", "needs 16 bytes", "cover 24"});
  expect_error(
      raw_file(
          "overlap.safetensors",
          R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
          d24),
      {"'a'", "'b'", "overlap"});
  expect_error(
      raw_file(
          "dup.safetensors",
          R"({"w":{"dtype":"F32","shape":[6],"data_offsets":[0,24]},"w":{"dtype":"F32","shape":[6],"data_offsets":[0,24]}})",
          d24),
      {"'w'", "appears twice"});
  expect_error(raw_file("order.safetensors",
                        R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", d24),
               {"'w'", "end before they begin"});
  expect_error(raw_file("neg.safetensors",
                        R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", d24),
               {"'w'", "non-negative"});
  expect_error(raw_file("fields.safetensors", R"({"w":{"dtype":"F32","shape":[1]}})", d24),
               {"'w'", "data_offsets"});
  expect_error(path("does_not_exist.safetensors"), {"cannot open"});
}

TEST_F(SafetensorsTest, IndexErrorsNameTheShard) {
  io::write_safetensors(path("s1.safetensors"),
                        {io::to_write_tensor("a", Tensor::full({2}, 1.0f))});
  std::ofstream(path("model.safetensors.index.json"))
      << R"({"metadata":{},"weight_map":{"a":"s1.safetensors","b":"s1.safetensors"}})";
  try {
    io::SafetensorsModel m(dir_.string());
    FAIL() << "no error for a weight_map entry missing from its shard";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'b'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("s1.safetensors"), std::string::npos) << e.what();
  }
  fs::remove(path("model.safetensors.index.json"));
  fs::remove(path("s1.safetensors"));
  EXPECT_THROW(io::SafetensorsModel m(dir_.string()), Error);  // nothing to load
}

TEST_F(SafetensorsTest, AtomicWriteKeepsOldFileOnFailure) {
  const std::string p = path("keep.safetensors");
  io::write_safetensors(p, {io::to_write_tensor("a", Tensor::full({3}, 1.0f))});
  // A duplicate name is rejected before anything is written: the old file survives intact.
  const std::vector<io::WriteTensor> bad = {io::to_write_tensor("a", Tensor::full({3}, 2.0f)),
                                            io::to_write_tensor("a", Tensor::full({3}, 2.0f))};
  EXPECT_THROW(io::write_safetensors(p, bad), Error);
  EXPECT_EQ(io::SafetensorsFile(p).load("a").to_double(), (std::vector<double>{1, 1, 1}));
  EXPECT_THROW(io::write_safetensors(path("no/such/dir/x.safetensors"), {}), Error);
}

}  // namespace
}  // namespace vkf
