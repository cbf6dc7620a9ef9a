// The Precompiled normalizer of SentencePiece-based tokenizers: a base64 "precompiled_charsmap"
// holding a Darts double-array trie (u32 units, little-endian, preceded by its byte size) and
// the NUL-terminated replacement strings it points to. As the library does, each grapheme
// shorter than 6 bytes is looked up whole; otherwise (or when absent) each character is.
#include <utf8proc.h>

#include "tokenizer/components.h"
#include "tokenizer/unicode.h"
#include "vk/error.h"

namespace vkf::tok {
namespace {

std::string base64_decode(const std::string& in, const std::string& where) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=' || c == '\n' || c == '\r') continue;
    const int v = val(c);
    VKF_REQUIRE(v >= 0, "{}: precompiled_charsmap is not valid base64", where);
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return out;
}

class Precompiled : public Normalizer {
 public:
  Precompiled(const std::string& b64, const std::string& where) {
    const std::string bytes = base64_decode(b64, where);
    VKF_REQUIRE(bytes.size() >= 4, "{}: precompiled_charsmap is too short", where);
    const auto u8 = [&](size_t i) {
      return static_cast<uint32_t>(static_cast<unsigned char>(bytes[i]));
    };
    const uint32_t trie_bytes = u8(0) | (u8(1) << 8) | (u8(2) << 16) | (u8(3) << 24);
    VKF_REQUIRE(trie_bytes % 4 == 0 && 4 + static_cast<size_t>(trie_bytes) <= bytes.size() &&
                    trie_bytes >= 4,
                "{}: precompiled_charsmap trie size {} does not fit its {} bytes", where,
                trie_bytes, bytes.size());
    for (size_t i = 4; i < 4 + trie_bytes; i += 4)
      units_.push_back(u8(i) | (u8(i + 1) << 8) | (u8(i + 2) << 16) | (u8(i + 3) << 24));
    normalized_ = bytes.substr(4 + trie_bytes);
  }

  std::string normalize(std::string s) const override {
    std::string out;
    utf8proc_int32_t state = 0, prev = -1;
    size_t g_start = 0;
    // Walk graphemes: a break before code point i ends the grapheme [g_start, i).
    for (size_t i = 0, len = 0; i <= s.size(); i += len) {
      len = 0;
      utf8proc_int32_t cp = -1;
      if (i < s.size()) cp = static_cast<utf8proc_int32_t>(decode_utf8(s, i, len));
      const bool brk =
          i == s.size() || (prev >= 0 && utf8proc_grapheme_break_stateful(prev, cp, &state));
      if (brk && i > g_start) {
        emit(std::string_view(s).substr(g_start, i - g_start), out);
        g_start = i;
      }
      prev = cp;
      if (i == s.size()) break;
    }
    return out;
  }

 private:
  std::vector<uint32_t> units_;
  std::string normalized_;

  // Replacement for the shortest trie key that is a prefix of `chunk`, as the library does.
  const char* transform(std::string_view chunk) const {
    auto offset = [](uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); };
    size_t pos = offset(units_[0]);
    for (unsigned char c : chunk) {
      if (c == 0) break;
      pos ^= c;
      if (pos >= units_.size()) return nullptr;
      const uint32_t u = units_[pos];
      if ((u & (0x80000000u | 0xFF)) != c) return nullptr;
      pos ^= offset(u);
      if (pos >= units_.size()) return nullptr;
      if ((u >> 8) & 1) {
        const uint32_t v = units_[pos] & 0x7FFFFFFFu;
        return v < normalized_.size() ? normalized_.c_str() + v : nullptr;
      }
    }
    return nullptr;
  }

  void emit(std::string_view g, std::string& out) const {
    if (g.size() < 6)
      if (const char* r = transform(g)) {
        out += r;
        return;
      }
    for (size_t i = 0, len = 0; i < g.size(); i += len) {
      decode_utf8(g, i, len);
      const std::string_view ch = g.substr(i, len);
      if (const char* r = transform(ch))
        out += r;
      else
        out += ch;
    }
  }
};

}  // namespace

std::unique_ptr<Normalizer> make_precompiled(const json& j, const std::string& where) {
  const json& cm = field(j, where, "precompiled_charsmap");
  VKF_REQUIRE(cm.is_string(), "{}.precompiled_charsmap: expected a base64 string", where);
  return std::make_unique<Precompiled>(cm.get<std::string>(), where + ".precompiled_charsmap");
}

}  // namespace vkf::tok
