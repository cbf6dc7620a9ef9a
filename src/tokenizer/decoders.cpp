// Decoders: turn model tokens back into text, each stage mapping a token list to a token list
// (as the library's decode_chain does) so that Sequence can chain them.
#include "tokenizer/components.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"
#include "vk/error.h"

namespace vkf::tok {
namespace {

using Tokens = std::vector<std::string>;

class FnDecoder : public Decoder {
 public:
  explicit FnDecoder(std::function<Tokens(Tokens)> f) : f_(std::move(f)) {}
  Tokens decode(Tokens t) const override { return f_(std::move(t)); }

 private:
  std::function<Tokens(Tokens)> f_;
};

std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
  std::string out;
  size_t prev = 0;
  for (size_t p = s.find(from); p != std::string::npos && !from.empty(); p = s.find(from, prev)) {
    out.append(s, prev, p - prev);
    out += to;
    prev = p + from.size();
  }
  out.append(s, prev, std::string::npos);
  return out;
}

// Parses "<0xAB>" into its byte; -1 when the token is not a byte token.
int byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int v = 0;
  for (int k = 3; k < 5; ++k) {
    const char c = t[static_cast<size_t>(k)];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

std::string wordpiece_cleanup(std::string s) {
  for (auto [a, b] :
       std::initializer_list<std::pair<const char*, const char*>>{{" .", "."},
                                                                  {" ?", "?"},
                                                                  {" !", "!"},
                                                                  {" ,", ","},
                                                                  {" ' ", "'"},
                                                                  {" n't", "n't"},
                                                                  {" 'm", "'m"},
                                                                  {" do not", " don't"},
                                                                  {" 's", "'s"},
                                                                  {" 've", "'ve"},
                                                                  {" 're", "'re"}})
    s = replace_all(s, a, b);
  return s;
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const json& j, const std::string& where) {
  const std::string t = type_of(j, where);
  using F = FnDecoder;
  if (t == "Sequence") {
    std::vector<std::shared_ptr<Decoder>> items;
    const json& list = field(j, where, "decoders");
    VKF_REQUIRE(list.is_array(), "{}.decoders: expected an array", where);
    for (size_t i = 0; i < list.size(); ++i)
      items.push_back(make_decoder(list[i], fmt::format("{}.decoders[{}]", where, i)));
    return std::make_unique<F>([items](Tokens tk) {
      for (const auto& d : items) tk = d->decode(std::move(tk));
      return tk;
    });
  }
  if (t == "ByteLevel")
    return std::make_unique<F>([](Tokens tk) {
      std::string bytes;
      for (const auto& tok : tk) {
        // A token with any character outside the byte table contributes its raw UTF-8.
        std::string mapped;
        bool ok = true;
        for (size_t i = 0, len = 0; i < tok.size() && ok; i += len) {
          const int b = byte_level_byte(decode_utf8(tok, i, len));
          if (b < 0)
            ok = false;
          else
            mapped += static_cast<char>(b);
        }
        bytes += ok ? mapped : tok;
      }
      return Tokens{utf8_lossy(bytes)};
    });
  if (t == "Metaspace") {
    const std::string rep = str_field(j, where, "replacement", "\xE2\x96\x81");
    std::string scheme = "always";
    if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null())
      scheme = str_field(j, where, "prepend_scheme");
    else if (!bool_field(j, where, "add_prefix_space", true))
      scheme = "never";
    return std::make_unique<F>([rep, scheme](Tokens tk) {
      for (size_t i = 0; i < tk.size(); ++i) {
        std::string s = replace_all(tk[i], rep, " ");
        if (i == 0 && scheme != "never" && !s.empty() && s[0] == ' ') s.erase(0, 1);
        tk[i] = std::move(s);
      }
      return tk;
    });
  }
  if (t == "ByteFallback")
    return std::make_unique<F>([](Tokens tk) {
      Tokens out;
      std::string pending;
      size_t n_pending = 0;
      auto flush = [&] {
        if (!n_pending) return;
        if (is_valid_utf8(pending))
          out.push_back(pending);
        else
          for (size_t k = 0; k < n_pending; ++k) out.push_back("\xEF\xBF\xBD");
        pending.clear();
        n_pending = 0;
      };
      for (auto& tok : tk) {
        const int b = byte_token(tok);
        if (b >= 0) {
          pending += static_cast<char>(b);
          ++n_pending;
        } else {
          flush();
          out.push_back(std::move(tok));
        }
      }
      flush();
      return out;
    });
  if (t == "Fuse")
    return std::make_unique<F>([](Tokens tk) {
      std::string s;
      for (auto& x : tk) s += x;
      return Tokens{s};
    });
  if (t == "Strip") {
    const std::string c = str_field(j, where, "content");
    const auto start = field(j, where, "start").get<size_t>();
    const auto stop = field(j, where, "stop").get<size_t>();
    return std::make_unique<F>([c, start, stop](Tokens tk) {
      for (auto& s : tk) {
        for (size_t k = 0; k < start && s.compare(0, c.size(), c) == 0; ++k) s.erase(0, c.size());
        for (size_t k = 0;
             k < stop && s.size() >= c.size() && s.compare(s.size() - c.size(), c.size(), c) == 0;
             ++k)
          s.erase(s.size() - c.size());
      }
      return tk;
    });
  }
  if (t == "Replace") {
    const Pattern pat = Pattern::parse(field(j, where, "pattern"), where + ".pattern");
    const std::string content = str_field(j, where, "content");
    return std::make_unique<F>([pat, content](Tokens tk) {
      for (auto& s : tk) {
        std::string out;
        size_t prev = 0;
        for (auto [b, e] : pat.find_all(s)) {
          out.append(s, prev, b - prev);
          out += content;
          prev = e;
        }
        out.append(s, prev, std::string::npos);
        s = std::move(out);
      }
      return tk;
    });
  }
  if (t == "WordPiece") {
    const std::string prefix = str_field(j, where, "prefix", "##");
    const bool cleanup = bool_field(j, where, "cleanup", true);
    return std::make_unique<F>([prefix, cleanup](Tokens tk) {
      for (size_t i = 0; i < tk.size(); ++i) {
        if (i > 0) {
          if (tk[i].compare(0, prefix.size(), prefix) == 0)
            tk[i].erase(0, prefix.size());
          else
            tk[i] = " " + tk[i];
        }
        if (cleanup) tk[i] = wordpiece_cleanup(tk[i]);
      }
      return tk;
    });
  }
  if (t == "BPEDecoder") {
    const std::string suffix = str_field(j, where, "suffix", "</w>");
    return std::make_unique<F>([suffix](Tokens tk) {
      for (size_t i = 0; i < tk.size(); ++i)
        tk[i] = replace_all(tk[i], suffix, i + 1 == tk.size() ? "" : " ");
      return tk;
    });
  }
  fail("{}.type: unknown decoder \"{}\"", where, t);
}

}  // namespace vkf::tok
