// Added-token matching; see added_tokens.h.
#include "tokenizer/added_tokens.h"

#include <utf8proc.h>

#include "tokenizer/unicode.h"

namespace vkf::tok {
namespace {

// Regex \w as the library's Rust regex sees it: letters, marks, numbers, connector punctuation.
bool is_word_char(char32_t c) {
  const auto k = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return is_alphanumeric(c) || is_combining_mark(c) || k == UTF8PROC_CATEGORY_PC;
}

char32_t last_char(std::string_view s) {
  size_t k = s.size() - 1;
  while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
  size_t len = 0;
  return decode_utf8(s, k, len);
}

}  // namespace

std::vector<Segment> split_added(std::string_view text,
                                 const std::vector<const AddedToken*>& tokens,
                                 const std::vector<std::string>& patterns, bool at_start) {
  struct Match {
    size_t s, e;
    int32_t id;
  };
  std::vector<Match> found;
  size_t prev_end = 0, pos = 0;
  // Next occurrence of each pattern at or after `pos`, refreshed only when passed, so a text
  // with many matches is still scanned about once per pattern.
  std::vector<size_t> next(patterns.size(), 0);
  std::vector<bool> fresh(patterns.size(), false);
  while (pos < text.size()) {
    // Leftmost-longest: the earliest start, then the longest pattern there.
    size_t best_s = std::string_view::npos, best_len = 0, best_k = 0;
    for (size_t k = 0; k < patterns.size(); ++k) {
      const std::string& p = patterns[k];
      if (p.empty()) continue;
      if (!fresh[k] || (next[k] != std::string_view::npos && next[k] < pos)) {
        next[k] = text.find(p, pos);
        fresh[k] = true;
      }
      const size_t s = next[k];
      if (s == std::string_view::npos) continue;
      if (s < best_s || (s == best_s && p.size() > best_len)) {
        best_s = s;
        best_len = p.size();
        best_k = k;
      }
    }
    if (best_s == std::string_view::npos) break;
    size_t s = best_s, e = best_s + best_len;
    const AddedToken& t = *tokens[best_k];
    pos = e;
    if (t.single_word) {
      const bool left_ok = s == 0 || !is_word_char(last_char(text.substr(0, s)));
      size_t len = 0;
      const bool right_ok = e == text.size() || !is_word_char(decode_utf8(text, e, len));
      // A rejected match is skipped whole: the library's matcher yields non-overlapping matches.
      if (!left_ok || !right_ok) continue;
    }
    if (t.lstrip) {
      size_t ns = s;
      while (ns > prev_end) {
        size_t k = ns - 1;
        while (k > prev_end && (static_cast<unsigned char>(text[k]) & 0xC0) == 0x80) --k;
        size_t len = 0;
        if (!is_whitespace(decode_utf8(text, k, len))) break;
        ns = k;
      }
      s = ns;
    }
    if (t.rstrip) {
      size_t len = 0;
      while (e < text.size() && is_whitespace(decode_utf8(text, e, len))) e += len;
    }
    found.push_back({s, e, t.id});
    prev_end = e;
    pos = e;
  }
  std::vector<Segment> out;
  size_t cur = 0;
  for (const auto& m : found) {
    if (m.s > cur)
      out.push_back({std::string(text.substr(cur, m.s - cur)), -1, at_start && cur == 0});
    out.push_back({std::string(text.substr(m.s, m.e - m.s)), m.id, at_start && m.s == 0});
    cur = m.e;
  }
  if (cur < text.size()) out.push_back({std::string(text.substr(cur)), -1, at_start && cur == 0});
  return out;
}

}  // namespace vkf::tok
