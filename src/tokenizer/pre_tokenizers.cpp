// Pre-tokenizers: split normalized text into the words the model sees, following the HF
// library's split behaviours.
#include <array>
#include <functional>
#include <unordered_map>

#include "tokenizer/components.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"
#include "vk/error.h"

namespace vkf::tok {

namespace {
struct ByteTable {
  std::array<std::string, 256> chars;
  std::unordered_map<char32_t, int> back;
  ByteTable() {
    // Printable Latin-1 bytes stand for themselves; the rest map to U+0100 upwards in order.
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      const char32_t c = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      append_utf8(chars[static_cast<size_t>(b)], c);
      back[c] = b;
    }
  }
};
const ByteTable& table() {
  static const ByteTable t;
  return t;
}

using Matches = std::vector<std::pair<size_t, size_t>>;

Matches char_matches(std::string_view s, const std::function<bool(char32_t)>& pred) {
  Matches m;
  for (size_t i = 0, len = 0; i < s.size(); i += len)
    if (pred(decode_utf8(s, i, len))) m.emplace_back(i, i + len);
  return m;
}

// Applies `f` to every piece, keeping `at_start` only on the first sub-piece of a start piece.
void split_each(std::vector<Piece>& pieces,
                const std::function<std::vector<std::string>(const std::string&)>& f) {
  std::vector<Piece> out;
  for (auto& p : pieces) {
    auto parts = f(p.text);
    for (size_t i = 0; i < parts.size(); ++i)
      out.push_back({std::move(parts[i]), p.at_start && i == 0});
  }
  pieces = std::move(out);
}

class FnPre : public PreTokenizer {
 public:
  explicit FnPre(std::function<void(std::vector<Piece>&)> f) : f_(std::move(f)) {}
  void split(std::vector<Piece>& p) const override { f_(p); }

 private:
  std::function<void(std::vector<Piece>&)> f_;
};

const char* kByteLevelRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

const std::string& byte_level_char(uint8_t b) {
  return table().chars[b];
}
int byte_level_byte(char32_t c) {
  auto it = table().back.find(c);
  return it == table().back.end() ? -1 : it->second;
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, const std::string& where) {
  const std::string t = type_of(j, where);
  if (t == "Sequence") {
    std::vector<std::shared_ptr<PreTokenizer>> items;
    const json& list = field(j, where, "pretokenizers");
    VKF_REQUIRE(list.is_array(), "{}.pretokenizers: expected an array", where);
    for (size_t i = 0; i < list.size(); ++i)
      items.push_back(make_pre_tokenizer(list[i], fmt::format("{}.pretokenizers[{}]", where, i)));
    return std::make_unique<FnPre>([items](std::vector<Piece>& p) {
      for (const auto& x : items) x->split(p);
    });
  }
  if (t == "ByteLevel") {
    const bool prefix = bool_field(j, where, "add_prefix_space", true);
    const bool use_regex = bool_field(j, where, "use_regex", true);
    auto re = Regex::get(kByteLevelRegex, where);
    return std::make_unique<FnPre>([=](std::vector<Piece>& pieces) {
      split_each(pieces, [&](const std::string& s) {
        std::string text = (prefix && (s.empty() || s[0] != ' ')) ? " " + s : s;
        std::vector<std::string> parts =
            use_regex ? split_by(text, re->find_all(text), SplitBehavior::Isolated)
                      : std::vector<std::string>{text};
        for (auto& part : parts) {
          std::string mapped;
          for (unsigned char b : part) mapped += byte_level_char(b);
          part = std::move(mapped);
        }
        return parts;
      });
    });
  }
  if (t == "Split") {
    const Pattern pat = Pattern::parse(field(j, where, "pattern"), where + ".pattern");
    const SplitBehavior b = parse_behavior(str_field(j, where, "behavior"), where);
    const bool invert = bool_field(j, where, "invert", false);
    return std::make_unique<FnPre>([=](std::vector<Piece>& pieces) {
      split_each(pieces,
                 [&](const std::string& s) { return split_by(s, pat.find_all(s), b, invert); });
    });
  }
  if (t == "Metaspace") {
    const std::string rep = str_field(j, where, "replacement", "\xE2\x96\x81");
    VKF_REQUIRE(to_code_points(rep).size() == 1, "{}.replacement: expected one character, got '{}'",
                where, rep);
    std::string scheme = "always";
    if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null())
      scheme = str_field(j, where, "prepend_scheme");
    else if (!bool_field(j, where, "add_prefix_space", true))
      scheme = "never";
    VKF_REQUIRE(scheme == "always" || scheme == "first" || scheme == "never",
                "{}.prepend_scheme: expected always, first or never, got \"{}\"", where, scheme);
    const bool do_split = bool_field(j, where, "split", true);
    return std::make_unique<FnPre>([=](std::vector<Piece>& pieces) {
      std::vector<Piece> out;
      for (auto& p : pieces) {
        std::string s;
        for (char c : p.text) c == ' ' ? void(s += rep) : void(s += c);
        const bool has = s.compare(0, rep.size(), rep) == 0;
        if (!has && (scheme == "always" || (scheme == "first" && p.at_start))) s = rep + s;
        if (!do_split) {
          out.push_back({s, p.at_start});
          continue;
        }
        Pattern lit;
        lit.literal = rep;
        auto parts = split_by(s, lit.find_all(s), SplitBehavior::MergedWithNext);
        for (size_t i = 0; i < parts.size(); ++i) out.push_back({parts[i], p.at_start && i == 0});
      }
      pieces = std::move(out);
    });
  }
  if (t == "Digits") {
    const bool each = bool_field(j, where, "individual_digits", false);
    return std::make_unique<FnPre>([each](std::vector<Piece>& pieces) {
      split_each(pieces, [&](const std::string& s) {
        return split_by(s, char_matches(s, is_numeric),
                        each ? SplitBehavior::Isolated : SplitBehavior::Contiguous);
      });
    });
  }
  if (t == "Punctuation") {
    const SplitBehavior b = parse_behavior(str_field(j, where, "behavior", "Isolated"), where);
    return std::make_unique<FnPre>([b](std::vector<Piece>& pieces) {
      split_each(pieces, [&](const std::string& s) {
        return split_by(s, char_matches(s, is_punctuation), b);
      });
    });
  }
  if (t == "Whitespace") {
    // Rust's \w also covers marks and joiners, which PCRE2's UCP \w (10.42) leaves out.
    auto re = Regex::get(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}]+|)"
                         R"([^\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}\s]+)",
                         where);
    return std::make_unique<FnPre>([re](std::vector<Piece>& pieces) {
      split_each(pieces, [&](const std::string& s) {
        return split_by(s, re->find_all(s), SplitBehavior::Removed, true);
      });
    });
  }
  if (t == "WhitespaceSplit" || t == "BertPreTokenizer") {
    const bool bert = t == "BertPreTokenizer";
    return std::make_unique<FnPre>([bert](std::vector<Piece>& pieces) {
      split_each(pieces, [](const std::string& s) {
        return split_by(s, char_matches(s, is_whitespace), SplitBehavior::Removed);
      });
      if (bert)
        split_each(pieces, [](const std::string& s) {
          return split_by(s, char_matches(s, is_punctuation), SplitBehavior::Isolated);
        });
    });
  }
  fail("{}.type: unknown pre-tokenizer \"{}\"", where, t);
}

}  // namespace vkf::tok
