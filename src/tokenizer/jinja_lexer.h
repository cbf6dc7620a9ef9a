// Tokenizer for Jinja template source. It applies the whitespace rules transformers configures
// (trim_blocks, lstrip_blocks, "-"/"+" markers, dropping one trailing newline) while splitting the
// source, so the parser only sees text tokens whose bytes are already final.
#pragma once

#include <string>
#include <vector>

namespace vkf::tokenizer::jinja {

enum class Tok {
  Text,        // literal template text
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,
  String,      // value already unescaped
  Int,
  Float,
  Op,          // operators and punctuation: + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . : |
  End,
};

struct Token {
  Tok kind;
  std::string text;
  int line;
  int col;
};

// Throws vkf::Error ("chat template line L, column C: ...") on unterminated tags or strings.
std::vector<Token> lex(const std::string& source);

}  // namespace vkf::tokenizer::jinja
