// Column chunk decoding (see parquet_pages.h), written from the Parquet format specification
// (parquet-format's Encodings.md and parquet.thrift). Every length read from the file is checked
// against the bytes that are there, so a corrupt or truncated file is an error, never a crash.
#include "data/parquet_pages.h"

#include <snappy-c.h>
#include <zlib.h>
#include <zstd.h>

#include <cstring>

#include "data/thrift.h"
#include "vk/error.h"

namespace vkf::data::parquet {
namespace {
using nlohmann::json;

enum PageType { DATA_PAGE = 0, INDEX_PAGE = 1, DICTIONARY_PAGE = 2, DATA_PAGE_V2 = 3 };
enum Encoding {
  PLAIN = 0, PLAIN_DICTIONARY = 2, RLE = 3, BIT_PACKED = 4, DELTA_BINARY_PACKED = 5,
  DELTA_LENGTH_BYTE_ARRAY = 6, DELTA_BYTE_ARRAY = 7, RLE_DICTIONARY = 8, BYTE_STREAM_SPLIT = 9,
};
enum Codec { UNCOMPRESSED = 0, SNAPPY = 1, GZIP = 2, LZO = 3, BROTLI = 4, LZ4 = 5, ZSTD = 6, LZ4_RAW = 7 };

const char* codec_name(int c) {
  static const char* names[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW"};
  return c >= 0 && c < 8 ? names[c] : "unknown";
}

// A bounds-checked cursor over page bytes.
struct Cursor {
  const uint8_t* p;
  size_t n;
  size_t pos = 0;
  const std::string& what;

  size_t left() const { return n - pos; }
  void need(size_t k) const {
    VKF_REQUIRE(k <= left(), "{}: page data ends early (needs {} bytes at offset {}, {} left); the file is corrupt",
                what, k, pos, left());
  }
  const uint8_t* take(size_t k) {
    need(k);
    const uint8_t* q = p + pos;
    pos += k;
    return q;
  }
  uint32_t u32() {
    const uint8_t* q = take(4);
    return static_cast<uint32_t>(q[0]) | static_cast<uint32_t>(q[1]) << 8 | static_cast<uint32_t>(q[2]) << 16 |
           static_cast<uint32_t>(q[3]) << 24;
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      const uint8_t b = *take(1);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("{}: a varint longer than 10 bytes; the file is corrupt", what);
  }
  int64_t zigzag() {
    const uint64_t v = varint();
    return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
  }
};

// Unpacks `count` values of `width` bits each, least significant bit first (Parquet's bit order).
void unpack_bits(const uint8_t* src, size_t count, int width, std::vector<uint64_t>& out) {
  uint64_t bitpos = 0;
  for (size_t k = 0; k < count; ++k) {
    uint64_t v = 0;
    for (int b = 0; b < width; ++b, ++bitpos)
      if (src[bitpos >> 3] >> (bitpos & 7) & 1) v |= uint64_t{1} << b;
    out.push_back(v);
  }
}

// The RLE / bit-packed hybrid: runs of (varint header, payload) until `count` values are read.
std::vector<uint32_t> hybrid(Cursor& c, int width, size_t count) {
  VKF_REQUIRE(width >= 0 && width <= 32, "{}: an RLE bit width of {} (at most 32)", c.what, width);
  std::vector<uint32_t> out;
  out.reserve(count);
  std::vector<uint64_t> tmp;
  while (out.size() < count) {
    const uint64_t header = c.varint();
    if (header & 1) {  // bit-packed: (header >> 1) groups of 8 values
      const uint64_t groups = header >> 1;
      VKF_REQUIRE(groups > 0 && groups <= c.left(), "{}: a bit-packed run of {} groups does not fit the page", c.what, groups);
      const size_t values = static_cast<size_t>(groups * 8);
      const uint8_t* src = c.take(static_cast<size_t>(groups) * static_cast<size_t>(width));
      tmp.clear();
      unpack_bits(src, std::min(values, count - out.size()), width, tmp);
      for (uint64_t v : tmp) out.push_back(static_cast<uint32_t>(v));
    } else {  // run of one repeated value stored in ceil(width / 8) bytes
      const uint64_t run = header >> 1;
      VKF_REQUIRE(run > 0, "{}: an empty RLE run; the file is corrupt", c.what);
      const uint8_t* src = c.take(static_cast<size_t>((width + 7) / 8));
      uint32_t v = 0;
      for (int b = 0; b < (width + 7) / 8; ++b) v |= static_cast<uint32_t>(src[b]) << (8 * b);
      const size_t k = static_cast<size_t>(std::min<uint64_t>(run, count - out.size()));
      out.insert(out.end(), k, v);
    }
  }
  return out;
}

std::vector<uint8_t> decompress(const uint8_t* src, size_t n, size_t expected, int codec, const std::string& what) {
  // Sizes are checked against what the compressed data can hold before anything is allocated, so a
  // corrupt header cannot ask for gigabytes.
  if (codec == UNCOMPRESSED)
    VKF_REQUIRE(n == expected, "{}: an uncompressed page of {} bytes where the header says {}", what, n, expected);
  if (codec == SNAPPY) {
    size_t len = 0;
    VKF_REQUIRE(snappy_uncompressed_length(reinterpret_cast<const char*>(src), n, &len) == SNAPPY_OK && len == expected,
                "{}: a snappy page that does not decode to the {} bytes its header gives", what, expected);
  }
  if (codec == ZSTD) {
    const unsigned long long len = ZSTD_getFrameContentSize(src, n);
    VKF_REQUIRE(len != ZSTD_CONTENTSIZE_ERROR, "{}: a corrupt zstd page (no zstd frame)", what);
    VKF_REQUIRE(len == ZSTD_CONTENTSIZE_UNKNOWN || len <= expected, "{}: a zstd page of {} bytes where the header says {}",
                what, len, expected);
  }
  if (codec == GZIP)  // deflate cannot expand more than about 1032:1
    VKF_REQUIRE(expected <= n * 1032 + 1024, "{}: a gzip page of {} bytes cannot hold the {} its header gives", what, n, expected);
  std::vector<uint8_t> out(expected);
  if (expected == 0 && codec != UNCOMPRESSED) return out;  // e.g. a v2 page of nulls only: no values
  switch (codec) {
    case UNCOMPRESSED:
      if (n) std::memcpy(out.data(), src, n);
      return out;
    case SNAPPY: {
      size_t len = expected;
      VKF_REQUIRE(snappy_uncompress(reinterpret_cast<const char*>(src), n, reinterpret_cast<char*>(out.data()), &len) == SNAPPY_OK,
                  "{}: a corrupt snappy page", what);
      return out;
    }
    case ZSTD: {
      const size_t r = ZSTD_decompress(out.data(), out.size(), src, n);
      VKF_REQUIRE(!ZSTD_isError(r), "{}: a corrupt zstd page ({})", what, ZSTD_getErrorName(r));
      VKF_REQUIRE(r == expected, "{}: a zstd page of {} bytes where the header says {}", what, r, expected);
      return out;
    }
    case GZIP: {
      z_stream z{};
      VKF_REQUIRE(inflateInit2(&z, 15 + 32) == Z_OK, "{}: zlib initialisation failed", what);
      z.next_in = const_cast<Bytef*>(src);
      z.avail_in = static_cast<uInt>(n);
      z.next_out = out.data();
      z.avail_out = static_cast<uInt>(out.size());
      int r = Z_OK;
      // Concatenated gzip members decode one after another into the same output.
      while (true) {
        r = inflate(&z, Z_NO_FLUSH);
        if (r == Z_STREAM_END && z.avail_in > 0 && z.avail_out > 0) {
          inflateReset(&z);
          continue;
        }
        break;
      }
      const size_t produced = out.size() - z.avail_out;
      inflateEnd(&z);
      VKF_REQUIRE(r == Z_STREAM_END && produced == expected, "{}: a corrupt gzip page (zlib status {}, {} of {} bytes)",
                  what, r, produced, expected);
      return out;
    }
    default:
      fail("{}: pages compressed with {} are not supported (supported: UNCOMPRESSED, SNAPPY, GZIP, ZSTD); "
           "rewrite the file with one of those", what, codec_name(codec));
  }
}

// DELTA_BINARY_PACKED: blocks of miniblocks of bit-packed deltas from a running value.
std::vector<int64_t> delta_binary(Cursor& c) {
  const uint64_t block = c.varint(), miniblocks = c.varint(), total = c.varint();
  int64_t value = c.zigzag();
  VKF_REQUIRE(block > 0 && block % 128 == 0 && miniblocks > 0 && block % miniblocks == 0 && (block / miniblocks) % 32 == 0,
              "{}: a DELTA_BINARY_PACKED header with block size {} and {} miniblocks is invalid", c.what, block, miniblocks);
  VKF_REQUIRE(total <= c.n * 64 + 1, "{}: DELTA_BINARY_PACKED claims {} values in a {}-byte page", c.what, total, c.n);
  const size_t per_mini = static_cast<size_t>(block / miniblocks);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(total));
  if (total > 0) out.push_back(value);
  std::vector<uint64_t> tmp;
  while (out.size() < total) {
    const int64_t min_delta = c.zigzag();
    const uint8_t* widths = c.take(static_cast<size_t>(miniblocks));
    for (uint64_t m = 0; m < miniblocks && out.size() < total; ++m) {
      const int w = widths[m];
      VKF_REQUIRE(w <= 64, "{}: a miniblock bit width of {}", c.what, w);
      const uint8_t* src = c.take(per_mini * static_cast<size_t>(w) / 8);
      tmp.clear();
      unpack_bits(src, std::min<size_t>(per_mini, static_cast<size_t>(total) - out.size()), w, tmp);
      for (uint64_t d : tmp) {
        value = static_cast<int64_t>(static_cast<uint64_t>(value) + static_cast<uint64_t>(min_delta) + d);
        out.push_back(value);
      }
    }
  }
  return out;
}

json plain_one(Cursor& c, const LeafDesc& leaf) {
  switch (leaf.physical) {
    case INT32: return static_cast<int32_t>(c.u32());
    case INT64: {
      const uint64_t lo = c.u32(), hi = c.u32();
      return static_cast<int64_t>(lo | hi << 32);
    }
    case FLOAT: {
      const uint32_t bits = c.u32();
      float f;
      std::memcpy(&f, &bits, 4);
      return static_cast<double>(f);
    }
    case DOUBLE: {
      const uint64_t lo = c.u32(), hi = c.u32();
      const uint64_t bits = lo | hi << 32;
      double d;
      std::memcpy(&d, &bits, 8);
      return d;
    }
    case BYTE_ARRAY: {
      const uint32_t len = c.u32();
      const uint8_t* s = c.take(len);
      return std::string(reinterpret_cast<const char*>(s), len);
    }
    case FIXED_LEN_BYTE_ARRAY: {
      const uint8_t* s = c.take(static_cast<size_t>(leaf.type_length));
      return std::string(reinterpret_cast<const char*>(s), static_cast<size_t>(leaf.type_length));
    }
    default:
      fail("{}: INT96 columns (legacy timestamps) are not supported", c.what);
  }
}

void decode_values(Cursor& c, int encoding, size_t count, const LeafDesc& leaf, const std::vector<json>& dict,
                   std::vector<json>& out) {
  switch (encoding) {
    case PLAIN:
      if (leaf.physical == BOOLEAN) {
        const uint8_t* bits = c.take((count + 7) / 8);
        for (size_t k = 0; k < count; ++k) out.push_back(static_cast<bool>(bits[k >> 3] >> (k & 7) & 1));
      } else {
        for (size_t k = 0; k < count; ++k) out.push_back(plain_one(c, leaf));
      }
      return;
    case PLAIN_DICTIONARY:
    case RLE_DICTIONARY: {
      VKF_REQUIRE(!dict.empty() || count == 0, "{}: dictionary-encoded values but no dictionary page", c.what);
      if (count == 0) return;
      const int width = *c.take(1);
      for (uint32_t id : hybrid(c, width, count)) {
        VKF_REQUIRE(id < dict.size(), "{}: dictionary index {} of a {}-entry dictionary", c.what, id, dict.size());
        out.push_back(dict[id]);
      }
      return;
    }
    case RLE: {
      VKF_REQUIRE(leaf.physical == BOOLEAN, "{}: RLE-encoded values are only defined for booleans", c.what);
      const uint32_t len = c.u32();
      Cursor sub{c.take(len), len, 0, c.what};
      for (uint32_t v : hybrid(sub, 1, count)) out.push_back(v != 0);
      return;
    }
    case DELTA_BINARY_PACKED: {
      VKF_REQUIRE(leaf.physical == INT32 || leaf.physical == INT64, "{}: DELTA_BINARY_PACKED on a non-integer column", c.what);
      const auto v = delta_binary(c);
      VKF_REQUIRE(v.size() >= count, "{}: {} delta-encoded values where {} are needed", c.what, v.size(), count);
      for (size_t k = 0; k < count; ++k)
        out.push_back(leaf.physical == INT32 ? json(static_cast<int32_t>(v[k])) : json(v[k]));
      return;
    }
    case DELTA_LENGTH_BYTE_ARRAY:
    case DELTA_BYTE_ARRAY: {
      VKF_REQUIRE(leaf.physical == BYTE_ARRAY || leaf.physical == FIXED_LEN_BYTE_ARRAY,
                  "{}: a byte-array delta encoding on a non-byte-array column", c.what);
      std::vector<int64_t> prefix;
      if (encoding == DELTA_BYTE_ARRAY) prefix = delta_binary(c);
      const auto lengths = delta_binary(c);
      VKF_REQUIRE(lengths.size() >= count && (prefix.empty() || prefix.size() >= count),
                  "{}: delta-encoded strings: {} lengths where {} are needed", c.what, lengths.size(), count);
      std::string prev;
      for (size_t k = 0; k < count; ++k) {
        VKF_REQUIRE(lengths[k] >= 0, "{}: a negative string length", c.what);
        const uint8_t* s = c.take(static_cast<size_t>(lengths[k]));
        std::string v;
        if (!prefix.empty()) {
          VKF_REQUIRE(prefix[k] >= 0 && static_cast<size_t>(prefix[k]) <= prev.size(),
                      "{}: a DELTA_BYTE_ARRAY prefix of {} from a {}-byte previous value", c.what, prefix[k], prev.size());
          v = prev.substr(0, static_cast<size_t>(prefix[k]));
        }
        v.append(reinterpret_cast<const char*>(s), static_cast<size_t>(lengths[k]));
        out.push_back(v);
        prev = std::move(v);
      }
      return;
    }
    case BYTE_STREAM_SPLIT: {
      const size_t width = leaf.physical == FLOAT || leaf.physical == INT32 ? 4 : 8;
      VKF_REQUIRE(leaf.physical == FLOAT || leaf.physical == DOUBLE || leaf.physical == INT32 || leaf.physical == INT64,
                  "{}: BYTE_STREAM_SPLIT on an unsupported column type", c.what);
      const uint8_t* src = c.take(count * width);
      for (size_t k = 0; k < count; ++k) {
        uint8_t bytes[8];
        for (size_t b = 0; b < width; ++b) bytes[b] = src[b * count + k];
        Cursor one{bytes, width, 0, c.what};
        out.push_back(plain_one(one, leaf));
      }
      return;
    }
    default:
      fail("{}: value encoding {} is not supported (supported: PLAIN, dictionary, RLE, DELTA_*, BYTE_STREAM_SPLIT)",
           c.what, encoding);
  }
}

// Levels of a v1 page: a 4-byte length, then the hybrid encoding.
std::vector<uint16_t> levels_v1(Cursor& c, int max_level, size_t count, int encoding) {
  VKF_REQUIRE(encoding == RLE, "{}: level encoding {} is not supported (only RLE; BIT_PACKED levels are deprecated)",
              c.what, encoding);
  const uint32_t len = c.u32();
  Cursor sub{c.take(len), len, 0, c.what};
  const int width = max_level == 0 ? 0 : 32 - __builtin_clz(static_cast<unsigned>(max_level));
  const auto v = hybrid(sub, width, count);
  return {v.begin(), v.end()};
}

std::vector<uint16_t> levels_raw(const uint8_t* p, size_t n, int max_level, size_t count, const std::string& what) {
  Cursor sub{p, n, 0, what};
  const int width = max_level == 0 ? 0 : 32 - __builtin_clz(static_cast<unsigned>(max_level));
  const auto v = hybrid(sub, width, count);
  return {v.begin(), v.end()};
}

void check_levels(const std::vector<uint16_t>& levels, int max_level, const char* kind, const std::string& what) {
  for (uint16_t l : levels)
    VKF_REQUIRE(l <= max_level, "{}: a {} level of {} above the schema's maximum {}", what, kind, l, max_level);
}

}  // namespace

std::vector<uint32_t> decode_rle_hybrid(std::span<const uint8_t> data, int bit_width, size_t count, const std::string& what) {
  Cursor c{data.data(), data.size(), 0, what};
  return hybrid(c, bit_width, count);
}

LeafData decode_chunk(std::span<const uint8_t> chunk, const LeafDesc& leaf, int codec, int64_t num_values,
                      const std::string& what) {
  LeafData out;
  std::vector<json> dict;
  size_t pos = 0;
  while (static_cast<int64_t>(out.def.size()) < num_values) {
    VKF_REQUIRE(pos < chunk.size(), "{}: the column chunk ends after {} of its {} values; the file is truncated",
                what, out.def.size(), num_values);
    size_t used = 0;
    const std::string where = fmt::format("{} (page at chunk byte {})", what, pos);
    const thrift::Value h = thrift::read_struct(chunk.data() + pos, chunk.size() - pos, used, where);
    pos += used;
    const int type = static_cast<int>(h.int_or(1, -1));
    const int64_t usize = h.int_or(2, -1), csize = h.int_or(3, -1);
    VKF_REQUIRE(usize >= 0 && csize >= 0 && static_cast<uint64_t>(csize) <= chunk.size() - pos,
                "{}: a page of {} bytes (uncompressed {}) where {} remain in the chunk", where, csize, usize, chunk.size() - pos);
    const uint8_t* body = chunk.data() + pos;
    pos += static_cast<size_t>(csize);
    if (type == DICTIONARY_PAGE) {
      const thrift::Value* dh = h.get(7);
      VKF_REQUIRE(dh, "{}: a dictionary page without its header", where);
      const auto bytes = decompress(body, static_cast<size_t>(csize), static_cast<size_t>(usize), codec, where);
      Cursor c{bytes.data(), bytes.size(), 0, where};
      dict.clear();
      const int64_t n = dh->int_or(1, 0);
      VKF_REQUIRE(n >= 0 && static_cast<uint64_t>(n) <= bytes.size() * 8 + 1, "{}: a dictionary of {} entries", where, n);
      decode_values(c, PLAIN, static_cast<size_t>(n), leaf, {}, dict);
      continue;
    }
    if (type != DATA_PAGE && type != DATA_PAGE_V2) continue;  // index pages carry nothing we read
    std::vector<uint16_t> rep, def;
    std::vector<uint8_t> values_bytes;
    size_t n = 0;
    int encoding = PLAIN;
    if (type == DATA_PAGE) {
      const thrift::Value* dh = h.get(5);
      VKF_REQUIRE(dh, "{}: a data page without its header", where);
      n = static_cast<size_t>(std::max<int64_t>(0, dh->int_or(1, 0)));
      VKF_REQUIRE(n <= static_cast<uint64_t>(num_values) - out.def.size(), "{}: a page of {} values where the chunk has {} left",
                  where, n, static_cast<uint64_t>(num_values) - out.def.size());
      encoding = static_cast<int>(dh->int_or(2, PLAIN));
      values_bytes = decompress(body, static_cast<size_t>(csize), static_cast<size_t>(usize), codec, where);
      Cursor c{values_bytes.data(), values_bytes.size(), 0, where};
      if (leaf.max_rep > 0) rep = levels_v1(c, leaf.max_rep, n, static_cast<int>(dh->int_or(4, RLE)));
      if (leaf.max_def > 0) def = levels_v1(c, leaf.max_def, n, static_cast<int>(dh->int_or(3, RLE)));
      values_bytes.erase(values_bytes.begin(), values_bytes.begin() + static_cast<std::ptrdiff_t>(c.pos));
    } else {
      const thrift::Value* dh = h.get(8);
      VKF_REQUIRE(dh, "{}: a v2 data page without its header", where);
      n = static_cast<size_t>(std::max<int64_t>(0, dh->int_or(1, 0)));
      VKF_REQUIRE(n <= static_cast<uint64_t>(num_values) - out.def.size(), "{}: a page of {} values where the chunk has {} left",
                  where, n, static_cast<uint64_t>(num_values) - out.def.size());
      encoding = static_cast<int>(dh->int_or(4, PLAIN));
      const int64_t def_len = dh->int_or(5, 0), rep_len = dh->int_or(6, 0);
      const thrift::Value* compressed = dh->get(7);
      const bool is_compressed = compressed == nullptr || compressed->i != 0;
      VKF_REQUIRE(def_len >= 0 && rep_len >= 0 && def_len + rep_len <= csize && def_len + rep_len <= usize,
                  "{}: level sections of {} + {} bytes in a {}-byte page", where, rep_len, def_len, csize);
      if (leaf.max_rep > 0) rep = levels_raw(body, static_cast<size_t>(rep_len), leaf.max_rep, n, where);
      if (leaf.max_def > 0) def = levels_raw(body + rep_len, static_cast<size_t>(def_len), leaf.max_def, n, where);
      const size_t skip = static_cast<size_t>(rep_len + def_len);
      values_bytes = decompress(body + skip, static_cast<size_t>(csize) - skip, static_cast<size_t>(usize) - skip,
                                is_compressed ? codec : UNCOMPRESSED, where);
    }
    if (rep.empty()) rep.assign(n, 0);
    if (def.empty()) def.assign(n, static_cast<uint16_t>(leaf.max_def));
    check_levels(rep, leaf.max_rep, "repetition", where);
    check_levels(def, leaf.max_def, "definition", where);
    size_t present = 0;
    for (uint16_t d : def) present += d == leaf.max_def;
    Cursor c{values_bytes.data(), values_bytes.size(), 0, where};
    decode_values(c, encoding, present, leaf, dict, out.values);
    out.rep.insert(out.rep.end(), rep.begin(), rep.end());
    out.def.insert(out.def.end(), def.begin(), def.end());
  }
  VKF_REQUIRE(static_cast<int64_t>(out.def.size()) == num_values, "{}: the pages hold {} values where the column chunk says {}",
              what, out.def.size(), num_values);
  return out;
}

}  // namespace vkf::data::parquet
