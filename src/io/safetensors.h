// safetensors files: a memory-mapped reader that validates the whole header up front (every
// malformed file is a vkf::Error naming the file and tensor), loading into device tensors with
// f16/bf16/f64 widened to f32 master weights, sharded checkpoints through
// model.safetensors.index.json, and a writer that transformers reads back (header padded to 8
// bytes, {"format":"pt"} metadata, contiguous offsets), written to a temporary name, flushed and
// renamed so a crash never leaves a half-written file under the real name.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace vkf::io {

// Element types a safetensors file may hold that vkformer reads.
enum class StDtype { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };
const char* st_dtype_name(StDtype t);
size_t st_dtype_size(StDtype t);

struct TensorEntry {
  std::string name;
  StDtype dtype;
  Shape shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
  int64_t numel() const { return shape_numel(shape); }
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorEntry>& entries() const { return entries_; }  // in file order
  const TensorEntry* find(const std::string& name) const;
  const TensorEntry& at(const std::string& name) const;  // error naming the file if missing
  std::span<const uint8_t> bytes(const TensorEntry& e) const;
  const nlohmann::json& metadata() const { return metadata_; }
  // Loads onto the device. Floating tensors become `float_dtype` (default f32); integer and bool
  // tensors become i64/i32 as stored (i16/i8/u8/bool widen to i32).
  Tensor load(const std::string& name, DType float_dtype = DType::F32) const;
  // Reads a tensor to the host as doubles (any numeric dtype); for tests and small tensors.
  std::vector<double> read_double(const std::string& name) const;

 private:
  std::string path_;
  int fd_ = -1;
  const uint8_t* map_ = nullptr;
  uint64_t size_ = 0;
  uint64_t data_start_ = 0;
  std::vector<TensorEntry> entries_;
  std::map<std::string, size_t> index_;
  nlohmann::json metadata_ = nlohmann::json::object();
};

// A model's weights: one model.safetensors, or shards listed by model.safetensors.index.json.
// `path` is a directory holding either, or a .safetensors / .index.json file.
class SafetensorsModel {
 public:
  explicit SafetensorsModel(const std::string& path);
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return where_.count(name) > 0; }
  const SafetensorsFile& file_of(const std::string& name) const;
  const TensorEntry& entry(const std::string& name) const;
  Tensor load(const std::string& name, DType float_dtype = DType::F32) const;
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;
};

// One tensor to write: host bytes in the given dtype, row-major.
struct WriteTensor {
  std::string name;
  StDtype dtype;
  Shape shape;
  std::vector<uint8_t> data;
};
WriteTensor to_write_tensor(const std::string& name, const Tensor& t);  // downloads

// Writes one file atomically (temporary name in the same directory, fsync, rename).
void write_safetensors(const std::string& path, const std::vector<WriteTensor>& tensors,
                       const nlohmann::json& metadata = {{"format", "pt"}});

// Writes `<stem>.safetensors`, or shards `<stem>-0000i-of-0000n.safetensors` plus
// `<stem>.safetensors.index.json` when the total exceeds max_shard_bytes (transformers' layout).
// Returns the files written (relative names).
std::vector<std::string> write_sharded(const std::string& dir, const std::vector<WriteTensor>& tensors,
                                       uint64_t max_shard_bytes, const std::string& stem = "model");

// Writes bytes to `path` atomically; used for every file vkformer writes for the user.
void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace vkf::io
