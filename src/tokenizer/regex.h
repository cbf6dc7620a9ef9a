// A PCRE2 wrapper (UTF + UCP, JIT when available) for the regexes in tokenizer.json files;
// compiled patterns are cached by source text since many components share one pattern.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vkf::tok {

class Regex {
 public:
  // Compiles `pattern`; a bad pattern is a vkf::Error naming `where` (the tokenizer.json field).
  static std::shared_ptr<const Regex> get(const std::string& pattern, const std::string& where);
  static std::string escape(std::string_view literal);
  // Every non-overlapping match as [start, end) byte offsets, left to right.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

 private:
  Regex() = default;
  void* code_ = nullptr;
  bool jit_ = false;
};

}  // namespace vkf::tok
