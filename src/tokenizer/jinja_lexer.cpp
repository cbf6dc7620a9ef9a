// Splits a Jinja template into text and tag tokens, applying jinja2's whitespace control exactly
// as transformers configures it: trim_blocks, lstrip_blocks, "-"/"+" markers, newline
// normalisation and the dropped final newline (keep_trailing_newline=False).
#include "tokenizer/jinja_lexer.h"

#include <algorithm>
#include <cctype>

#include "vk/error.h"

namespace vkf::tokenizer::jinja {
namespace {

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {
    for (size_t k = 0; k < src_.size(); ++k)
      if (src_[k] == '\n') line_starts_.push_back(k + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    while (pos < src_.size()) {
      size_t idx = find_tag(pos);
      std::string text = src_.substr(pos, idx - pos);
      size_t text_pos = pos;
      if (idx == src_.size()) {
        emit_text(text, text_pos);
        break;
      }
      char type = src_[idx + 1];  // '{', '%' or '#'
      char marker = idx + 2 < src_.size() ? src_[idx + 2] : '\0';
      if (marker == '-') {
        while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
      } else if (type != '{' && marker != '+') {
        // lstrip_blocks: spaces and tabs between the line start and a block or comment tag go.
        size_t nl = text.rfind('\n');
        size_t from = nl == std::string::npos ? 0 : nl + 1;
        bool at_line_start = nl != std::string::npos || text_pos == 0 || src_[text_pos - 1] == '\n';
        bool blank = std::all_of(text.begin() + static_cast<long>(from), text.end(), [](char c) {
          return c != '\n' && std::isspace(static_cast<unsigned char>(c));
        });
        if (at_line_start && blank) text.erase(from);
      }
      emit_text(text, text_pos);
      size_t body = idx + 2 + ((marker == '-' || marker == '+') ? 1 : 0);
      if (type == '#') {
        size_t end = src_.find("#}", body);
        if (end == std::string::npos) error(idx, "unterminated comment: missing '#}'");
        pos = after_tag(end + 2, end > body && src_[end - 1] == '-', src_[end - 1] == '+', true);
      } else {
        pos = lex_tag(idx, body, type == '%');
      }
    }
    out_.push_back({Tok::End, "", line_of(src_.size()), col_of(src_.size())});
    return std::move(out_);
  }

 private:
  [[noreturn]] void error(size_t off, const std::string& what) const {
    fail("chat template line {}, column {}: {}", line_of(off), col_of(off), what);
  }
  int line_of(size_t off) const {
    return static_cast<int>(std::upper_bound(line_starts_.begin(), line_starts_.end(), off) -
                            line_starts_.begin()) + 1;
  }
  int col_of(size_t off) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), off);
    size_t start = it == line_starts_.begin() ? 0 : *(it - 1);
    return static_cast<int>(off - start) + 1;
  }
  size_t find_tag(size_t pos) const {
    for (size_t k = pos; k + 1 < src_.size(); ++k)
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#'))
        return k;
    return src_.size();
  }
  void emit_text(const std::string& text, size_t off) {
    if (!text.empty()) out_.push_back({Tok::Text, text, line_of(off), col_of(off)});
  }
  // Position after a closing tag: "-" eats all following whitespace; otherwise trim_blocks eats
  // one newline after block and comment tags unless the tag ends with "+".
  size_t after_tag(size_t pos, bool minus, bool plus, bool is_block) const {
    if (minus) {
      while (pos < src_.size() && std::isspace(static_cast<unsigned char>(src_[pos]))) ++pos;
    } else if (is_block && !plus && pos < src_.size() && src_[pos] == '\n') {
      ++pos;
    }
    return pos;
  }

  size_t lex_tag(size_t open, size_t p, bool block) {
    out_.push_back({block ? Tok::BlockBegin : Tok::VarBegin, "", line_of(open), col_of(open)});
    size_t first_tok = out_.size();
    int depth = 0;
    const char* close = block ? "%}" : "}}";
    for (;;) {
      while (p < src_.size() && std::isspace(static_cast<unsigned char>(src_[p]))) ++p;
      if (p >= src_.size()) error(open, std::string("unterminated tag: missing '") + close + "'");
      bool minus = src_.compare(p, 3, std::string("-") + close) == 0;
      bool plus = block && src_.compare(p, 3, "+%}") == 0;
      if (depth == 0 && (minus || plus || src_.compare(p, 2, close) == 0)) {
        size_t end = p + (minus || plus ? 3 : 2);
        out_.push_back({block ? Tok::BlockEnd : Tok::VarEnd, "", line_of(p), col_of(p)});
        size_t next = after_tag(end, minus, plus, block);
        if (block && out_.size() == first_tok + 2 && out_[first_tok].kind == Tok::Name &&
            out_[first_tok].text == "raw")
          return lex_raw(open, next);
        return next;
      }
      char c = src_[p];
      size_t start = p;
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        while (p < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) ++p;
        push(Tok::Name, src_.substr(start, p - start), start);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        bool is_float = false;
        while (p < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) ++p;
        if (p + 1 < src_.size() && src_[p] == '.' && std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
          is_float = true;
          ++p;
          while (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) ++p;
        }
        if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
          size_t q = p + 1;
          if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
          if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
            is_float = true;
            p = q;
            while (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) ++p;
          }
        }
        std::string num = src_.substr(start, p - start);
        num.erase(std::remove(num.begin(), num.end(), '_'), num.end());
        push(is_float ? Tok::Float : Tok::Int, num, start);
      } else if (c == '\'' || c == '"') {
        push(Tok::String, lex_string(p), start);
      } else {
        static const char* two[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op(1, c);
        for (const char* t : two)
          if (src_.compare(p, 2, t) == 0) op = t;
        if (std::string("+-*/%~=<>()[]{},.:|!").find(c) == std::string::npos)
          error(p, std::string("unexpected character '") + c + "' in tag");
        if (op == "!") error(p, "unexpected character '!' in tag");
        if (c == '(' || c == '[' || c == '{') ++depth;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        p += op.size();
        push(Tok::Op, op, start);
      }
    }
  }

  // Python string-literal escapes, which is what jinja2 applies to quoted strings.
  std::string lex_string(size_t& p) {
    char q = src_[p];
    size_t open = p++;
    std::string s;
    while (p < src_.size() && src_[p] != q) {
      char c = src_[p++];
      if (c != '\\') {
        s += c;
        continue;
      }
      if (p >= src_.size()) break;
      char e = src_[p++];
      switch (e) {
        case 'n': s += '\n'; break;
        case 't': s += '\t'; break;
        case 'r': s += '\r'; break;
        case '0': s += '\0'; break;
        case 'b': s += '\b'; break;
        case 'f': s += '\f'; break;
        case '\\': s += '\\'; break;
        case '\'': s += '\''; break;
        case '"': s += '"'; break;
        case '\n': break;
        case 'u':
        case 'x': {
          size_t n = e == 'u' ? 4 : 2;
          uint32_t cp = static_cast<uint32_t>(std::stoul(src_.substr(p, n), nullptr, 16));
          p += n;
          append_utf8(s, cp);
          break;
        }
        default: s += '\\'; s += e;
      }
    }
    if (p >= src_.size()) error(open, "unterminated string literal");
    ++p;
    return s;
  }
  static void append_utf8(std::string& s, uint32_t cp) {
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xc0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      s += static_cast<char>(0xe0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  // {% raw %}...{% endraw %}: the body is text, untouched by the tag syntax.
  size_t lex_raw(size_t open, size_t p) {
    out_.resize(out_.size() - 3);  // drop the raw tag itself
    for (size_t k = p; k + 1 < src_.size(); ++k) {
      if (src_.compare(k, 2, "{%") != 0) continue;
      size_t q = k + 2;
      bool minus_open = q < src_.size() && src_[q] == '-';
      if (minus_open || (q < src_.size() && src_[q] == '+')) ++q;
      while (q < src_.size() && std::isspace(static_cast<unsigned char>(src_[q]))) ++q;
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < src_.size() && std::isspace(static_cast<unsigned char>(src_[q]))) ++q;
      bool minus = src_.compare(q, 3, "-%}") == 0;
      if (!minus && src_.compare(q, 2, "%}") != 0) continue;
      std::string text = src_.substr(p, k - p);
      if (minus_open)
        while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
      emit_text(text, p);
      return after_tag(q + (minus ? 3 : 2), minus, false, true);
    }
    error(open, "unterminated raw block: missing '{% endraw %}'");
  }

  void push(Tok kind, std::string text, size_t off) {
    out_.push_back({kind, std::move(text), line_of(off), col_of(off)});
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> lex(const std::string& source) {
  // jinja2 normalises every newline to "\n" and drops one final newline.
  std::string src;
  src.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      src += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      src += source[k];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src)).run();
}

}  // namespace vkf::tokenizer::jinja
