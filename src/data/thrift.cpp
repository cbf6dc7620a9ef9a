// Thrift compact protocol decoding (see thrift.h). Written from the protocol specification: field
// headers carry a 4-bit id delta and a 4-bit type, integers are zigzag varints, binaries and
// collections are prefixed by varint sizes, and a zero byte ends a struct.
#include "data/thrift.h"

#include <cstring>

#include "vk/error.h"

namespace vkf::data::thrift {
namespace {

enum Type : uint8_t {
  kStop = 0, kTrue = 1, kFalse = 2, kByte = 3, kI16 = 4, kI32 = 5, kI64 = 6, kDouble = 7,
  kBinary = 8, kList = 9, kSet = 10, kMap = 11, kStruct = 12,
};

// Nesting deeper than this is not Parquet metadata; refusing it bounds the recursion.
constexpr int kMaxDepth = 64;

class Reader {
 public:
  Reader(const uint8_t* p, size_t n, const std::string& what) : p_(p), n_(n), what_(what) {}
  size_t pos() const { return pos_; }

  uint8_t byte() {
    VKF_REQUIRE(pos_ < n_, "{}: Thrift data ends early (at byte {}); the file is truncated or not Parquet", what_, pos_);
    return p_[pos_++];
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      const uint8_t b = byte();
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("{}: a Thrift varint at byte {} is longer than 10 bytes; the file is corrupt", what_, pos_);
  }
  int64_t zigzag() {
    const uint64_t v = varint();
    return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
  }
  size_t size_prefix() {
    const uint64_t n = varint();
    VKF_REQUIRE(n <= n_ - pos_, "{}: a Thrift size of {} at byte {} runs past the end ({} bytes left); the file is corrupt",
                what_, n, pos_, n_ - pos_);
    return static_cast<size_t>(n);
  }

  Value value(uint8_t type, int depth) {
    VKF_REQUIRE(depth < kMaxDepth, "{}: Thrift structures nested deeper than {}; the file is corrupt", what_, kMaxDepth);
    Value v;
    switch (type) {
      case kTrue:
      case kFalse:
        v.kind = Value::Kind::Bool;
        v.i = type == kTrue ? 1 : 0;
        return v;
      case kByte:
        v.i = static_cast<int8_t>(byte());
        return v;
      case kI16:
      case kI32:
      case kI64:
        v.i = zigzag();
        return v;
      case kDouble: {
        v.kind = Value::Kind::Double;
        uint64_t bits = 0;
        for (int b = 0; b < 8; ++b) bits |= static_cast<uint64_t>(byte()) << (8 * b);
        static_assert(sizeof(double) == sizeof(uint64_t));
        std::memcpy(&v.d, &bits, sizeof bits);
        return v;
      }
      case kBinary: {
        v.kind = Value::Kind::Binary;
        const size_t n = size_prefix();
        v.s.assign(reinterpret_cast<const char*>(p_ + pos_), n);
        pos_ += n;
        return v;
      }
      case kList:
      case kSet: {
        v.kind = Value::Kind::List;
        const uint8_t h = byte();
        uint64_t count = h >> 4;
        if (count == 15) count = varint();
        const uint8_t elem = h & 0x0f;
        // Every element takes at least one byte, which bounds a corrupt count.
        VKF_REQUIRE(count <= n_ - pos_, "{}: a Thrift list of {} elements at byte {} cannot fit in the data", what_, count, pos_);
        v.list.reserve(static_cast<size_t>(count));
        for (uint64_t k = 0; k < count; ++k) {
          if (elem == kTrue || elem == kFalse) {  // booleans in collections are one byte each
            Value b;
            b.kind = Value::Kind::Bool;
            b.i = byte() == 1 ? 1 : 0;
            v.list.push_back(b);
          } else {
            v.list.push_back(value(elem, depth + 1));
          }
        }
        return v;
      }
      case kMap: {
        v.kind = Value::Kind::Map;
        const uint64_t count = varint();
        if (count == 0) return v;
        VKF_REQUIRE(count <= n_ - pos_, "{}: a Thrift map of {} entries at byte {} cannot fit in the data", what_, count, pos_);
        const uint8_t kv = byte();
        for (uint64_t k = 0; k < count; ++k) {
          v.list.push_back(value(kv >> 4, depth + 1));
          v.list.push_back(value(kv & 0x0f, depth + 1));
        }
        return v;
      }
      case kStruct:
        return structure(depth + 1);
      default:
        fail("{}: unknown Thrift type {} at byte {}; the file is corrupt or not Parquet", what_, type, pos_);
    }
  }

  Value structure(int depth) {
    VKF_REQUIRE(depth < kMaxDepth, "{}: Thrift structures nested deeper than {}; the file is corrupt", what_, kMaxDepth);
    Value v;
    v.kind = Value::Kind::Struct;
    int16_t last = 0;
    for (;;) {
      const uint8_t h = byte();
      if (h == kStop) return v;
      const uint8_t type = h & 0x0f;
      const int delta = h >> 4;
      const int16_t id = delta ? static_cast<int16_t>(last + delta) : static_cast<int16_t>(zigzag());
      v.fields[id] = value(type, depth);
      last = id;
    }
  }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
  const std::string& what_;
};

}  // namespace

const Value* Value::get(int16_t id) const {
  auto it = fields.find(id);
  return it == fields.end() ? nullptr : &it->second;
}

int64_t Value::int_or(int16_t id, int64_t fallback) const {
  const Value* v = get(id);
  return v ? v->i : fallback;
}

std::string Value::string_or(int16_t id, const std::string& fallback) const {
  const Value* v = get(id);
  return v && v->kind == Kind::Binary ? v->s : fallback;
}

const std::vector<Value>& Value::list_of(int16_t id) const {
  static const std::vector<Value> empty;
  const Value* v = get(id);
  return v && v->kind == Kind::List ? v->list : empty;
}

Value read_struct(const uint8_t* data, size_t size, size_t& consumed, const std::string& what) {
  Reader r(data, size, what);
  Value v = r.structure(0);
  consumed = r.pos();
  return v;
}

}  // namespace vkf::data::thrift
