// Normalizers: string-to-string rewrites applied before pre-tokenization. Offsets are not
// tracked (vkformer only needs ids), so each is a plain function of the text.
#include <functional>

#include "tokenizer/components.h"
#include "tokenizer/unicode.h"
#include "vk/error.h"

namespace vkf::tok {
namespace {

class FnNormalizer : public Normalizer {
 public:
  explicit FnNormalizer(std::function<std::string(std::string)> f) : f_(std::move(f)) {}
  std::string normalize(std::string s) const override { return f_(std::move(s)); }

 private:
  std::function<std::string(std::string)> f_;
};

class SequenceNormalizer : public Normalizer {
 public:
  std::vector<std::unique_ptr<Normalizer>> items;
  std::string normalize(std::string s) const override {
    for (const auto& n : items) s = n->normalize(std::move(s));
    return s;
  }
};

std::string filter_chars(const std::string& s, const std::function<bool(char32_t)>& keep) {
  std::string out;
  for (size_t i = 0, len = 0; i < s.size(); i += len) {
    const char32_t c = decode_utf8(s, i, len);
    if (keep(c)) out.append(s, i, len);
  }
  return out;
}

std::string strip(const std::string& s, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left)
    for (size_t len = 0; b < e; b += len)
      if (!is_whitespace(decode_utf8(s, b, len))) break;
  if (right)
    while (e > b) {
      size_t k = e - 1;
      while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
      size_t len = 0;
      if (!is_whitespace(decode_utf8(s, k, len))) break;
      e = k;
    }
  return s.substr(b, e - b);
}

std::string bert_normalize(const std::string& in, bool clean, bool chinese, bool accents,
                           bool lower) {
  std::string s;
  for (size_t i = 0, len = 0; i < in.size(); i += len) {
    const char32_t c = decode_utf8(in, i, len);
    if (clean) {
      if (c == 0 || c == 0xFFFD || is_control(c)) continue;
      if (is_whitespace(c)) {
        s += ' ';
        continue;
      }
    }
    if (chinese && is_cjk(c)) {
      s += ' ';
      s.append(in, i, len);
      s += ' ';
      continue;
    }
    s.append(in, i, len);
  }
  // Unlike StripAccents, BERT removes only nonspacing marks (Mn), keeping e.g. the keycap U+20E3.
  if (accents)
    s = filter_chars(normalize_form(s, NormForm::NFD),
                     [](char32_t c) { return !is_mark_nonspacing(c); });
  if (lower) s = lowercase(s);
  return s;
}

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const json& j, const std::string& where) {
  const std::string t = type_of(j, where);
  using F = FnNormalizer;
  if (t == "Sequence") {
    auto seq = std::make_unique<SequenceNormalizer>();
    const json& list = field(j, where, "normalizers");
    VKF_REQUIRE(list.is_array(), "{}.normalizers: expected an array", where);
    for (size_t i = 0; i < list.size(); ++i)
      seq->items.push_back(make_normalizer(list[i], fmt::format("{}.normalizers[{}]", where, i)));
    return seq;
  }
  if (t == "NFC")
    return std::make_unique<F>([](std::string s) { return normalize_form(s, NormForm::NFC); });
  if (t == "NFD")
    return std::make_unique<F>([](std::string s) { return normalize_form(s, NormForm::NFD); });
  if (t == "NFKC")
    return std::make_unique<F>([](std::string s) { return normalize_form(s, NormForm::NFKC); });
  if (t == "NFKD")
    return std::make_unique<F>([](std::string s) { return normalize_form(s, NormForm::NFKD); });
  if (t == "Lowercase") return std::make_unique<F>([](std::string s) { return lowercase(s); });
  if (t == "Strip") {
    const bool l = bool_field(j, where, "strip_left", true),
               r = bool_field(j, where, "strip_right", true);
    return std::make_unique<F>([l, r](std::string s) { return strip(s, l, r); });
  }
  if (t == "StripAccents")
    return std::make_unique<F>([](std::string s) {
      return filter_chars(s, [](char32_t c) { return !is_combining_mark(c); });
    });
  if (t == "Prepend") {
    const std::string p = str_field(j, where, "prepend");
    // The library prepends only to non-empty text.
    return std::make_unique<F>([p](std::string s) { return s.empty() ? s : p + s; });
  }
  if (t == "Replace") {
    const Pattern pat = Pattern::parse(field(j, where, "pattern"), where + ".pattern");
    const std::string content = str_field(j, where, "content");
    return std::make_unique<F>([pat, content](std::string s) {
      std::string out;
      size_t prev = 0;
      for (auto [b, e] : pat.find_all(s)) {
        out.append(s, prev, b - prev);
        out += content;
        prev = e;
      }
      out.append(s, prev, std::string::npos);
      return out;
    });
  }
  if (t == "BertNormalizer") {
    const bool clean = bool_field(j, where, "clean_text", true);
    const bool chinese = bool_field(j, where, "handle_chinese_chars", true);
    const bool lower = bool_field(j, where, "lowercase", true);
    // strip_accents null means "follow lowercase", as in the library.
    const bool accents = bool_field(j, where, "strip_accents", lower);
    return std::make_unique<F>(
        [=](std::string s) { return bert_normalize(s, clean, chinese, accents, lower); });
  }
  if (t == "Precompiled") return make_precompiled(j, where);
  fail("{}.type: unknown normalizer \"{}\"", where, t);
}

}  // namespace vkf::tok
