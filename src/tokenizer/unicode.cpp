// UTF-8 and Unicode helpers; categories and normalization come from utf8proc.
#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <cstdlib>

#include "vk/error.h"

namespace vkf::tok {

char32_t decode_utf8(std::string_view s, size_t i, size_t& len) {
  utf8proc_int32_t cp = 0;
  const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                  static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
  if (n <= 0) {
    len = 1;
    return 0xFFFD;
  }
  len = static_cast<size_t>(n);
  return static_cast<char32_t>(cp);
}

void append_utf8(std::string& out, char32_t c) {
  utf8proc_uint8_t buf[4];
  const auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

std::vector<char32_t> to_code_points(std::string_view s) {
  std::vector<char32_t> out;
  for (size_t i = 0, len = 0; i < s.size(); i += len) out.push_back(decode_utf8(s, i, len));
  return out;
}

// Length of the valid UTF-8 sequence at s[i], or 0 with `bad` = bytes of the maximal invalid
// prefix (the Unicode "substitution of maximal subparts" rule Rust follows).
static size_t valid_seq(std::string_view s, size_t i, size_t& bad) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  bad = 1;
  if (c < 0x80) return 1;
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF)
    need = 1;
  else if (c == 0xE0) {
    need = 2;
    lo = 0xA0;
  } else if (c >= 0xE1 && c <= 0xEC)
    need = 2;
  else if (c == 0xED) {
    need = 2;
    hi = 0x9F;
  } else if (c >= 0xEE && c <= 0xEF)
    need = 2;
  else if (c == 0xF0) {
    need = 3;
    lo = 0x90;
  } else if (c >= 0xF1 && c <= 0xF3)
    need = 3;
  else if (c == 0xF4) {
    need = 3;
    hi = 0x8F;
  } else
    return 0;
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return 0;
    const unsigned char x = b(i + k);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (x < l || x > h) return 0;
    bad = k + 1;
  }
  return need + 1;
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t bad = 1;
    const size_t n = valid_seq(s, i, bad);
    if (n) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += bad;
    }
  }
  return out;
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t bad = 1;
    const size_t n = valid_seq(s, i, bad);
    if (!n) return false;
    i += n;
  }
  return true;
}

bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

static utf8proc_category_t cat(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

bool is_alphanumeric(char32_t c) {
  const auto k = cat(c);
  return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
         (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

bool is_punctuation(char32_t c) {
  if (c < 0x80)
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
           (c >= 123 && c <= 126);
  const auto k = cat(c);
  return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

bool is_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  const auto k = cat(c);
  return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CS ||
         k == UTF8PROC_CATEGORY_CO || k == UTF8PROC_CATEGORY_CN;
}

bool is_mark_nonspacing(char32_t c) {
  return cat(c) == UTF8PROC_CATEGORY_MN;
}

bool is_combining_mark(char32_t c) {
  const auto k = cat(c);
  return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME;
}

bool is_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

std::string lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0, len = 0; i < s.size(); i += len) {
    const char32_t c = decode_utf8(s, i, len);
    // Rust's to_lowercase maps U+0130 to two code points; utf8proc's simple mapping cannot.
    if (c == 0x130) {
      out += "i\xCC\x87";
      continue;
    }
    append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
  }
  return out;
}

std::string normalize_form(std::string_view s, NormForm form) {
  int opts = UTF8PROC_STABLE;
  switch (form) {
    case NormForm::NFC:
      opts |= UTF8PROC_COMPOSE;
      break;
    case NormForm::NFD:
      opts |= UTF8PROC_DECOMPOSE;
      break;
    case NormForm::NFKC:
      opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormForm::NFKD:
      opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                              static_cast<utf8proc_ssize_t>(s.size()), &out,
                              static_cast<utf8proc_option_t>(opts));
  if (n < 0) fail("tokenizer: Unicode normalization failed: {}", utf8proc_errmsg(n));
  std::string r(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return r;
}

}  // namespace vkf::tok

namespace vkf::tok {
bool is_numeric(char32_t c) {
  const auto k = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO;
}
}  // namespace vkf::tok
