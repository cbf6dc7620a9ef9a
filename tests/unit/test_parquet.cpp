// The Parquet reader against files written by independent writers: every folder under
// tests/fixtures/parquet/ holds files and an expected.json with the rows they all contain
// (arrow_rs/: the Rust parquet crate through parquet-wasm, tools/oracle/parquet_wasm_fixtures.mjs;
// pyarrow/: tools/oracle/parquet_fixtures.py with pyarrow 25.0.1 on the H200 machine). Also the
// RLE / bit-packed hybrid on the format specification's own example, column projection, and
// corrupt or truncated files giving errors that name the file (never a crash).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "data/parquet.h"
#include "data/parquet_pages.h"
#include "test_util.h"
#include "vk/error.h"

namespace vkf {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kRepo = fs::path(__FILE__).parent_path().parent_path().parent_path();
const fs::path kFixtures = kRepo / "tests/fixtures/parquet";

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

TEST(Parquet, RleHybridSpecExample) {
  // parquet-format Encodings.md: the values 0..7 bit-packed with width 3 are the bytes
  // 10001000 11000110 11111010, after a header of one group of 8: (1 << 1) | 1.
  const std::vector<uint8_t> packed = {0x03, 0x88, 0xC6, 0xFA};
  EXPECT_EQ(data::parquet::decode_rle_hybrid(packed, 3, 8, "t"), (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  // A run of five 4s (header 5 << 1, value in one byte), then the packed group, cut at 10 values.
  const std::vector<uint8_t> mixed = {0x0A, 0x04, 0x03, 0x88, 0xC6, 0xFA};
  EXPECT_EQ(data::parquet::decode_rle_hybrid(mixed, 3, 10, "t"), (std::vector<uint32_t>{4, 4, 4, 4, 4, 0, 1, 2, 3, 4}));
  // Width 0: runs with no value bytes.
  EXPECT_EQ(data::parquet::decode_rle_hybrid(std::vector<uint8_t>{0x06}, 0, 3, "t"), (std::vector<uint32_t>{0, 0, 0}));
  test::expect_error([&] { data::parquet::decode_rle_hybrid(std::vector<uint8_t>{0x0A}, 3, 5, "levels of x"); },
                     {"levels of x", "ends early"});
}

TEST(Parquet, FixturesReadWithIdenticalRows) {
  int folders = 0, files = 0;
  for (const auto& dir : fs::directory_iterator(kFixtures)) {
    if (!fs::exists(dir.path() / "expected.json")) continue;
    ++folders;
    const json expected = read_json(dir.path() / "expected.json");
    ASSERT_TRUE(expected["files"].is_array() && !expected["files"].empty()) << dir.path();
    for (const auto& f : expected["files"]) {
      const fs::path path = dir.path() / f.get<std::string>();
      SCOPED_TRACE(path.string());
      const auto rows = data::read_parquet(path.string());
      ASSERT_EQ(rows.size(), expected["rows"].size());
      for (size_t r = 0; r < rows.size(); ++r) {
        ASSERT_EQ(rows[r], expected["rows"][r]) << "row " << r << "\n got " << rows[r].dump() << "\n want "
                                                << expected["rows"][r].dump();
      }
      ++files;
    }
  }
  EXPECT_GE(folders, 2);  // arrow_rs and pyarrow
  EXPECT_GE(files, 33);
}

TEST(Parquet, ColumnsAndProjection) {
  const fs::path path = kFixtures / "arrow_rs/arrow_rs_snappy_dict_v1.parquet";
  data::ParquetFile f(path.string());
  EXPECT_EQ(f.columns(), (std::vector<std::string>{"id", "text", "prompt", "completion", "messages", "tags", "score", "flag"}));
  EXPECT_EQ(f.num_rows(), 257);
  const json expected = read_json(kFixtures / "arrow_rs/expected.json");
  size_t r = 0;
  f.read_rows({"messages", "text"}, [&](json&& row) {
    ASSERT_EQ(row.size(), 2u);
    EXPECT_EQ(row["messages"], expected["rows"][r]["messages"]);
    EXPECT_EQ(row["text"], expected["rows"][r]["text"]);
    ++r;
  });
  EXPECT_EQ(r, 257u);
  test::expect_error([&] { f.read_rows({"content"}, [](json&&) {}); },
                     {"arrow_rs_snappy_dict_v1.parquet", "no column 'content'", "text, prompt"});
}

TEST(Parquet, BadFilesAreErrors) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("vkf_parquet_{}", ::getpid());
  fs::create_directories(dir);
  const auto good = read_bytes(kFixtures / "arrow_rs/arrow_rs_zstd_dict_v2.parquet");
  write_bytes(dir / "text.parquet", std::vector<uint8_t>{'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '!', '!'});
  test::expect_error([&] { data::read_parquet((dir / "text.parquet").string()); }, {"text.parquet", "not a Parquet file"});
  auto truncated = good;
  truncated.resize(good.size() / 2);
  write_bytes(dir / "half.parquet", truncated);
  test::expect_error([&] { data::read_parquet((dir / "half.parquet").string()); }, {"half.parquet"});
  // Damage at many places: every outcome is rows or a vkf::Error, never a crash or a hang.
  std::mt19937 rng(7);
  int errors = 0;
  for (int trial = 0; trial < 150; ++trial) {
    auto bad = good;
    const size_t at = rng() % bad.size();
    for (size_t k = at; k < std::min(bad.size(), at + 1 + rng() % 6); ++k) bad[k] = static_cast<uint8_t>(rng());
    write_bytes(dir / "bad.parquet", bad);
    try {
      data::read_parquet((dir / "bad.parquet").string());
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("bad.parquet"), std::string::npos) << e.what();
      ++errors;
    }
  }
  EXPECT_GT(errors, 10);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace vkf
