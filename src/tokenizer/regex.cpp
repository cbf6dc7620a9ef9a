// PCRE2 wrapper; match data is per call so one compiled Regex can be shared across threads.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include <map>
#include <mutex>

#include "vk/error.h"

namespace vkf::tok {

std::shared_ptr<const Regex> Regex::get(const std::string& pattern, const std::string& where) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const Regex>> cache;
  std::lock_guard lock(mu);
  if (auto it = cache.find(pattern); it != cache.end()) return it->second;
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &off, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail("{}: invalid regex '{}' at offset {}: {}; fix the pattern in tokenizer.json", where,
         pattern, off, reinterpret_cast<const char*>(msg));
  }
  std::shared_ptr<Regex> r(new Regex());
  r->code_ = code;
  r->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  cache[pattern] = r;
  return r;
}

std::string Regex::escape(std::string_view lit) {
  std::string out;
  for (char c : lit) {
    if (std::string_view("\\^$.|?*+()[]{}/-#").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

Regex::~Regex() {
  pcre2_code_free(static_cast<pcre2_code*>(code_));
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  size_t pos = 0;
  while (pos <= text.size()) {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    const int rc =
        jit_ ? pcre2_jit_match(code, subject, text.size(), pos, 0, md, nullptr)
             : pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t s = ov[0], e = ov[1];
    if (e == s) {
      // An empty match: step over one whole character so the next search starts on a boundary.
      if (s >= text.size()) break;
      size_t n = 1;
      while (s + n < text.size() && (static_cast<unsigned char>(text[s + n]) & 0xC0) == 0x80) ++n;
      pos = s + n;
      continue;
    }
    out.emplace_back(s, e);
    pos = e;
  }
  pcre2_match_data_free(md);
  return out;
}

}  // namespace vkf::tok
