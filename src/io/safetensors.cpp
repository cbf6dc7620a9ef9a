// safetensors reading, validation and atomic writing (see safetensors.h).
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "vk/error.h"

namespace vkf::io {
namespace fs = std::filesystem;
using nlohmann::json;

const char* st_dtype_name(StDtype t) {
  switch (t) {
    case StDtype::F64: return "F64";
    case StDtype::F32: return "F32";
    case StDtype::F16: return "F16";
    case StDtype::BF16: return "BF16";
    case StDtype::I64: return "I64";
    case StDtype::I32: return "I32";
    case StDtype::I16: return "I16";
    case StDtype::I8: return "I8";
    case StDtype::U8: return "U8";
    case StDtype::BOOL: return "BOOL";
  }
  return "?";
}

size_t st_dtype_size(StDtype t) {
  switch (t) {
    case StDtype::F64:
    case StDtype::I64: return 8;
    case StDtype::F32:
    case StDtype::I32: return 4;
    case StDtype::F16:
    case StDtype::BF16:
    case StDtype::I16: return 2;
    case StDtype::I8:
    case StDtype::U8:
    case StDtype::BOOL: return 1;
  }
  return 0;
}

namespace {

std::optional<StDtype> parse_dtype(const std::string& s) {
  for (StDtype t : {StDtype::F64, StDtype::F32, StDtype::F16, StDtype::BF16, StDtype::I64,
                    StDtype::I32, StDtype::I16, StDtype::I8, StDtype::U8, StDtype::BOOL}) {
    if (s == st_dtype_name(t)) return t;
  }
  return std::nullopt;
}

// Reads an unsigned JSON integer field, or fails naming file, tensor and field.
uint64_t as_u64(const json& v, const std::string& file, const std::string& tensor, const char* field) {
  VKF_REQUIRE(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0),
              "{}: tensor '{}': field '{}' must hold non-negative integers, got {}", file, tensor,
              field, v.dump());
  return v.get<uint64_t>();
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  VKF_REQUIRE(fd_ >= 0, "{}: cannot open ({})", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    fail("{}: not a regular file", path);
  }
  size_ = static_cast<uint64_t>(st.st_size);
  try {
    VKF_REQUIRE(size_ >= 8, "{}: {} bytes is too short for a safetensors file (needs an 8-byte "
                "header length); the file is truncated or not safetensors", path, size_);
    if (size_ > 0) {
      void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
      VKF_REQUIRE(m != MAP_FAILED, "{}: cannot map the file ({})", path, std::strerror(errno));
      map_ = static_cast<const uint8_t*>(m);
    }
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | map_[i];  // little-endian
    VKF_REQUIRE(header_len <= size_ - 8,
                "{}: header length {} runs past the end of the file ({} bytes); the file is "
                "truncated or not safetensors", path, header_len, size_);
    data_start_ = 8 + header_len;
    const char* hb = reinterpret_cast<const char*>(map_ + 8);
    std::set<std::string> seen;
    json header;
    try {
      header = json::parse(hb, hb + header_len, [&](int depth, json::parse_event_t ev, json& v) {
        if (depth == 1 && ev == json::parse_event_t::key) {
          const std::string key = v.get<std::string>();
          VKF_REQUIRE(seen.insert(key).second, "{}: tensor '{}' appears twice in the header", path, key);
        }
        return true;
      });
    } catch (const json::exception& e) {
      fail("{}: the header is not valid JSON ({}); the file is corrupt", path, e.what());
    }
    VKF_REQUIRE(header.is_object(), "{}: the header must be a JSON object", path);
    const uint64_t data_size = size_ - data_start_;
    for (auto& [name, info] : header.items()) {
      if (name == "__metadata__") {
        VKF_REQUIRE(info.is_object(), "{}: __metadata__ must be an object of strings", path);
        metadata_ = info;
        continue;
      }
      VKF_REQUIRE(info.is_object() && info.contains("dtype") && info.contains("shape") &&
                      info.contains("data_offsets"),
                  "{}: tensor '{}' needs dtype, shape and data_offsets", path, name);
      VKF_REQUIRE(info["dtype"].is_string(), "{}: tensor '{}': dtype must be a string", path, name);
      const std::string dt = info["dtype"].get<std::string>();
      const auto dtype = parse_dtype(dt);
      VKF_REQUIRE(dtype.has_value(),
                  "{}: tensor '{}' has dtype {}, which vkformer does not read (supported: F64, "
                  "F32, F16, BF16, I64, I32, I16, I8, U8, BOOL); convert it with transformers first",
                  path, name, dt);
      TensorEntry e;
      e.name = name;
      e.dtype = *dtype;
      VKF_REQUIRE(info["shape"].is_array(), "{}: tensor '{}': shape must be an array", path, name);
      for (const auto& d : info["shape"]) e.shape.push_back(static_cast<int64_t>(as_u64(d, path, name, "shape")));
      const auto& off = info["data_offsets"];
      VKF_REQUIRE(off.is_array() && off.size() == 2,
                  "{}: tensor '{}': data_offsets must be [begin, end]", path, name);
      e.begin = as_u64(off[0], path, name, "data_offsets");
      e.end = as_u64(off[1], path, name, "data_offsets");
      VKF_REQUIRE(e.begin <= e.end, "{}: tensor '{}': data_offsets [{}, {}] end before they begin",
                  path, name, e.begin, e.end);
      VKF_REQUIRE(e.end <= data_size,
                  "{}: tensor '{}': data_offsets [{}, {}] run past the data section ({} bytes); the "
                  "file is truncated", path, name, e.begin, e.end, data_size);
      const uint64_t want = static_cast<uint64_t>(e.numel()) * st_dtype_size(e.dtype);
      VKF_REQUIRE(e.end - e.begin == want,
                  "{}: tensor '{}': shape {} of {} needs {} bytes but data_offsets cover {}", path,
                  name, shape_str(e.shape), dt, want, e.end - e.begin);
      entries_.push_back(std::move(e));
    }
    std::sort(entries_.begin(), entries_.end(),
              [](const TensorEntry& a, const TensorEntry& b) { return a.begin < b.begin; });
    for (size_t i = 1; i < entries_.size(); ++i) {
      VKF_REQUIRE(entries_[i].begin >= entries_[i - 1].end,
                  "{}: tensors '{}' and '{}' overlap in the data section", path,
                  entries_[i - 1].name, entries_[i].name);
    }
    for (size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].name] = i;
  } catch (...) {
    if (map_) ::munmap(const_cast<uint8_t*>(map_), size_);
    ::close(fd_);
    map_ = nullptr;
    fd_ = -1;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), size_);
  if (fd_ >= 0) ::close(fd_);
}

const TensorEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

const TensorEntry& SafetensorsFile::at(const std::string& name) const {
  const TensorEntry* e = find(name);
  VKF_REQUIRE(e, "{}: no tensor named '{}' ({} tensors in the file)", path_, name, entries_.size());
  return *e;
}

std::span<const uint8_t> SafetensorsFile::bytes(const TensorEntry& e) const {
  return {map_ + data_start_ + e.begin, static_cast<size_t>(e.end - e.begin)};
}

std::vector<double> SafetensorsFile::read_double(const std::string& name) const {
  const TensorEntry& e = at(name);
  const auto b = bytes(e);
  const size_t n = static_cast<size_t>(e.numel());
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = b.data() + i * st_dtype_size(e.dtype);
    switch (e.dtype) {
      case StDtype::F64: { double v; std::memcpy(&v, p, 8); out[i] = v; break; }
      case StDtype::F32: { float v; std::memcpy(&v, p, 4); out[i] = v; break; }
      case StDtype::F16: { uint16_t v; std::memcpy(&v, p, 2); out[i] = f16_bits_to_f32(v); break; }
      case StDtype::BF16: { uint16_t v; std::memcpy(&v, p, 2); out[i] = bf16_bits_to_f32(v); break; }
      case StDtype::I64: { int64_t v; std::memcpy(&v, p, 8); out[i] = static_cast<double>(v); break; }
      case StDtype::I32: { int32_t v; std::memcpy(&v, p, 4); out[i] = v; break; }
      case StDtype::I16: { int16_t v; std::memcpy(&v, p, 2); out[i] = v; break; }
      case StDtype::I8: out[i] = static_cast<int8_t>(*p); break;
      case StDtype::U8:
      case StDtype::BOOL: out[i] = *p; break;
    }
  }
  return out;
}

Tensor SafetensorsFile::load(const std::string& name, DType float_dtype) const {
  const TensorEntry& e = at(name);
  const auto b = bytes(e);
  switch (e.dtype) {
    case StDtype::F32: {
      Tensor t = Tensor::from_bytes(b.data(), DType::F32, e.shape);
      return float_dtype == DType::F32 ? t : t.to(float_dtype);
    }
    case StDtype::F16:
    case StDtype::BF16: {
      // Uploaded as stored and widened on the GPU: half the bytes over the bus.
      const DType stored = e.dtype == StDtype::F16 ? DType::F16 : DType::BF16;
      Tensor t = Tensor::from_bytes(b.data(), stored, e.shape);
      return float_dtype == stored ? t : t.to(float_dtype);
    }
    case StDtype::F64: {
      const auto d = read_double(name);
      Tensor t = Tensor::from_host(std::span<const double>(d), e.shape);
      return float_dtype == DType::F32 ? t : t.to(float_dtype);
    }
    case StDtype::I64: return Tensor::from_bytes(b.data(), DType::I64, e.shape);
    case StDtype::I32: return Tensor::from_bytes(b.data(), DType::I32, e.shape);
    case StDtype::I16:
    case StDtype::I8:
    case StDtype::U8:
    case StDtype::BOOL: {
      const auto d = read_double(name);
      std::vector<int32_t> v(d.begin(), d.end());
      return Tensor::from_host_i32(v, e.shape);
    }
  }
  fail("{}: tensor '{}': unsupported dtype", path_, name);
}

SafetensorsModel::SafetensorsModel(const std::string& path) {
  fs::path p(path);
  fs::path index;
  if (fs::is_directory(p)) {
    if (fs::exists(p / "model.safetensors.index.json")) {
      index = p / "model.safetensors.index.json";
    } else if (fs::exists(p / "model.safetensors")) {
      p = p / "model.safetensors";
    } else {
      fail("{}: no model.safetensors or model.safetensors.index.json in this folder", path);
    }
  } else if (p.string().ends_with(".json")) {
    index = p;
  }
  if (index.empty()) {
    source_ = p.string();
    files_.push_back(std::make_unique<SafetensorsFile>(source_));
    for (const auto& e : files_[0]->entries()) where_[e.name] = 0;
    return;
  }
  source_ = index.string();
  json j;
  {
    std::ifstream in(index);
    VKF_REQUIRE(in, "{}: cannot open", source_);
    try {
      j = json::parse(in);
    } catch (const json::exception& e) {
      fail("{}: not valid JSON ({})", source_, e.what());
    }
  }
  VKF_REQUIRE(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
              "{}: needs a \"weight_map\" object from tensor names to shard files", source_);
  std::map<std::string, size_t> shard_index;
  for (auto& [name, file] : j["weight_map"].items()) {
    VKF_REQUIRE(file.is_string(), "{}: weight_map['{}'] must be a file name", source_, name);
    const std::string f = file.get<std::string>();
    auto it = shard_index.find(f);
    if (it == shard_index.end()) {
      files_.push_back(std::make_unique<SafetensorsFile>((index.parent_path() / f).string()));
      it = shard_index.emplace(f, files_.size() - 1).first;
    }
    VKF_REQUIRE(files_[it->second]->find(name),
                "{}: weight_map says '{}' is in {}, but that shard has no such tensor", source_,
                name, f);
    where_[name] = it->second;
  }
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> out;
  for (const auto& [n, i] : where_) out.push_back(n);
  return out;
}

const SafetensorsFile& SafetensorsModel::file_of(const std::string& name) const {
  auto it = where_.find(name);
  VKF_REQUIRE(it != where_.end(), "{}: no tensor named '{}'", source_, name);
  return *files_[it->second];
}

const TensorEntry& SafetensorsModel::entry(const std::string& name) const {
  return file_of(name).at(name);
}

Tensor SafetensorsModel::load(const std::string& name, DType float_dtype) const {
  return file_of(name).load(name, float_dtype);
}

WriteTensor to_write_tensor(const std::string& name, const Tensor& t) {
  WriteTensor w;
  w.name = name;
  w.shape = t.shape();
  switch (t.dtype()) {
    case DType::F32: w.dtype = StDtype::F32; break;
    case DType::F16: w.dtype = StDtype::F16; break;
    case DType::BF16: w.dtype = StDtype::BF16; break;
    case DType::I32: w.dtype = StDtype::I32; break;
    case DType::I64: w.dtype = StDtype::I64; break;
  }
  w.data = t.to_bytes();
  return w;
}

void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  VKF_REQUIRE(fs::is_directory(dir), "{}: the folder {} does not exist", path, dir.string());
  std::string tmpl = (dir / fmt::format(".{}.tmp-XXXXXX", target.filename().string())).string();
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  const int fd = ::mkstemp(name.data());
  VKF_REQUIRE(fd >= 0, "{}: cannot create a temporary file in {} ({})", path, dir.string(),
              std::strerror(errno));
  const std::string tmp(name.data());
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail("{}: write failed after {} of {} bytes ({}); the previous file, if any, is untouched",
           path, done, bytes.size(), std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail("{}: cannot flush to disk ({}); the previous file, if any, is untouched", path,
         std::strerror(err));
  }
  ::chmod(tmp.c_str(), 0644);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail("{}: cannot rename the finished temporary file into place ({})", path, std::strerror(err));
  }
}

namespace {
std::vector<uint8_t> serialize(const std::vector<const WriteTensor*>& tensors, const json& metadata) {
  json header = json::object();
  if (!metadata.is_null() && !metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const WriteTensor* t : tensors) {
    VKF_REQUIRE(names.insert(t->name).second, "safetensors writer: tensor '{}' given twice", t->name);
    const uint64_t n = static_cast<uint64_t>(shape_numel(t->shape)) * st_dtype_size(t->dtype);
    VKF_REQUIRE(t->data.size() == n, "safetensors writer: tensor '{}' of shape {} needs {} bytes, got {}",
                t->name, shape_str(t->shape), n, t->data.size());
    header[t->name] = {{"dtype", st_dtype_name(t->dtype)},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');  // data section starts 8-byte aligned
  std::vector<uint8_t> out;
  out.reserve(8 + h.size() + offset);
  const uint64_t len = h.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(len >> (8 * i)));
  out.insert(out.end(), h.begin(), h.end());
  for (const WriteTensor* t : tensors) out.insert(out.end(), t->data.begin(), t->data.end());
  return out;
}
}  // namespace

void write_safetensors(const std::string& path, const std::vector<WriteTensor>& tensors,
                       const json& metadata) {
  std::vector<const WriteTensor*> ptrs;
  for (const auto& t : tensors) ptrs.push_back(&t);
  const auto bytes = serialize(ptrs, metadata);
  write_file_atomic(path, bytes);
}

std::vector<std::string> write_sharded(const std::string& dir, const std::vector<WriteTensor>& tensors,
                                       uint64_t max_shard_bytes, const std::string& stem) {
  VKF_REQUIRE(max_shard_bytes > 0, "write_sharded: max_shard_bytes must be positive");
  // Greedy split in the given order, as transformers' shard_checkpoint does: a tensor larger than
  // the limit gets a shard of its own.
  std::vector<std::vector<const WriteTensor*>> shards(1);
  uint64_t current = 0, total = 0;
  for (const auto& t : tensors) {
    const uint64_t n = t.data.size();
    if (!shards.back().empty() && current + n > max_shard_bytes) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(&t);
    current += n;
    total += n;
  }
  const json meta = {{"format", "pt"}};
  std::vector<std::string> written;
  if (shards.size() == 1) {
    const std::string name = stem + ".safetensors";
    write_file_atomic((fs::path(dir) / name).string(), serialize(shards[0], meta));
    return {name};
  }
  json weight_map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name =
        fmt::format("{}-{:05d}-of-{:05d}.safetensors", stem, i + 1, shards.size());
    write_file_atomic((fs::path(dir) / name).string(), serialize(shards[i], meta));
    for (const WriteTensor* t : shards[i]) weight_map[t->name] = name;
    written.push_back(name);
  }
  const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  const std::string text = index.dump(2) + "\n";
  const std::string index_name = stem + ".safetensors.index.json";
  write_file_atomic((fs::path(dir) / index_name).string(),
                    {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  written.push_back(index_name);
  return written;
}

}  // namespace vkf::io
