// UTF-8 and Unicode helpers for the tokenizer: code point iteration, character classes as the
// HF tokenizers library (Rust char methods) defines them, and normalization forms via utf8proc.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vkf::tok {

// Decodes the code point at s[i]; sets len to its byte length (1 for an invalid byte).
char32_t decode_utf8(std::string_view s, size_t i, size_t& len);
void append_utf8(std::string& out, char32_t c);
std::vector<char32_t> to_code_points(std::string_view s);
// Rust's String::from_utf8_lossy: each maximal invalid subsequence becomes U+FFFD.
std::string utf8_lossy(std::string_view bytes);
bool is_valid_utf8(std::string_view bytes);

bool is_whitespace(char32_t c);       // Rust char::is_whitespace (White_Space property)
bool is_alphanumeric(char32_t c);     // letters and numbers
bool is_numeric(char32_t c);          // Nd, Nl or No (Rust char::is_numeric)
bool is_punctuation(char32_t c);      // ASCII punctuation or a Unicode P* category
bool is_control(char32_t c);          // C* category except \t \n \r (BERT's definition)
bool is_mark_nonspacing(char32_t c);  // Mn (what BertNormalizer's strip_accents removes)
bool is_combining_mark(char32_t c);   // Mn, Mc or Me (what StripAccents removes)
bool is_cjk(char32_t c);
std::string lowercase(std::string_view s);

enum class NormForm { NFC, NFD, NFKC, NFKD };
std::string normalize_form(std::string_view s, NormForm form);

}  // namespace vkf::tok
