// A reader of the Thrift compact protocol (the encoding of Parquet's footer and page headers) into
// a generic tree of values keyed by field id, so that the Parquet code reads the fields it knows
// and unknown or future fields are skipped without a generated schema. Malformed input (truncated,
// bad type tags, absurd sizes) is a vkf::Error naming `what` (the file and structure being read).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace vkf::data::thrift {

struct Value {
  enum class Kind { Bool, Int, Double, Binary, List, Struct, Map } kind = Kind::Int;
  int64_t i = 0;  // Bool (0/1), byte, i16, i32, i64
  double d = 0.0;
  std::string s;                  // Binary (strings and byte blobs)
  std::vector<Value> list;        // List/Set elements; Map: key, value, key, value, ...
  std::map<int16_t, Value> fields;  // Struct fields by id

  // Struct field access. `get` returns nullptr when the field is absent.
  const Value* get(int16_t id) const;
  int64_t int_or(int16_t id, int64_t fallback) const;
  std::string string_or(int16_t id, const std::string& fallback) const;
  const std::vector<Value>& list_of(int16_t id) const;  // empty when absent
};

// Reads one struct from `data`; `consumed` receives the bytes used (page headers are followed by
// the page). `what` names the input in errors, e.g. "data.parquet: page header at byte 4".
Value read_struct(const uint8_t* data, size_t size, size_t& consumed, const std::string& what);

}  // namespace vkf::data::thrift
