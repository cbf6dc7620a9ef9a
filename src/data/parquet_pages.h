// Decoding of one Parquet column chunk (internal to the Parquet reader): page headers, page
// decompression (snappy, gzip, zstd), repetition/definition levels (RLE / bit-packed hybrid) and
// values (PLAIN, PLAIN_DICTIONARY / RLE_DICTIONARY, RLE booleans, DELTA_BINARY_PACKED,
// DELTA_LENGTH_BYTE_ARRAY, DELTA_BYTE_ARRAY), for data pages v1 and v2.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace vkf::data::parquet {

// Physical types and codecs as numbered in parquet.thrift.
enum Physical { BOOLEAN = 0, INT32 = 1, INT64 = 2, INT96 = 3, FLOAT = 4, DOUBLE = 5, BYTE_ARRAY = 6, FIXED_LEN_BYTE_ARRAY = 7 };

struct LeafDesc {
  int physical = BYTE_ARRAY;
  int type_length = 0;  // FIXED_LEN_BYTE_ARRAY
  int max_def = 0;
  int max_rep = 0;
  std::string path;  // dotted, for errors
};

// One leaf column of a row group: a level pair per entry, a value per entry whose definition level
// is max_def (strings hold raw bytes; integers, doubles and booleans their JSON kinds).
struct LeafData {
  std::vector<uint16_t> rep, def;
  std::vector<nlohmann::json> values;
};

// `chunk`: the column chunk's bytes (first page header to the end). `what` names file and column.
LeafData decode_chunk(std::span<const uint8_t> chunk, const LeafDesc& leaf, int codec, int64_t num_values,
                      const std::string& what);

// Exposed for tests: decodes `count` values of the RLE / bit-packed hybrid with `bit_width`.
std::vector<uint32_t> decode_rle_hybrid(std::span<const uint8_t> data, int bit_width, size_t count,
                                        const std::string& what);

}  // namespace vkf::data::parquet
