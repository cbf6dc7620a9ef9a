// A Parquet file reader for dataset files: the footer (Thrift compact FileMetaData), the schema
// tree, and rows assembled from the column chunks of each row group as JSON values (strings,
// numbers, booleans, null; LIST columns as arrays, structs as objects, so that a `messages`
// list<struct<role, content>> column reads as a chat conversation). Only the requested top-level
// columns are read. Encodings and codecs: see parquet_pages.h. Errors name the file and column.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace vkf::data {

class ParquetFile {
 public:
  explicit ParquetFile(const std::string& path);
  ~ParquetFile();
  ParquetFile(const ParquetFile&) = delete;
  ParquetFile& operator=(const ParquetFile&) = delete;

  int64_t num_rows() const;
  std::vector<std::string> columns() const;  // top-level field names, in schema order
  // Calls `row` with each row, in order, as an object with the requested top-level columns (every
  // column when `wanted` is empty). A requested column that does not exist is an error that lists
  // the columns there are.
  void read_rows(const std::vector<std::string>& wanted, const std::function<void(nlohmann::json&&)>& row) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Every row of the file (convenience for tests and small files).
std::vector<nlohmann::json> read_parquet(const std::string& path, const std::vector<std::string>& wanted = {});

}  // namespace vkf::data
