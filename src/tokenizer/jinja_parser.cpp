// Recursive-descent parser from jinja tokens to the syntax tree, following jinja2's grammar and
// operator precedence (or < and < not < comparisons < + - < ~ < * / // % < ** < unary < postfix,
// filters and tests bind to the unary operand).
#include <set>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_lexer.h"
#include "vk/error.h"

namespace vkf::tokenizer::jinja {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Body parse_all() {
    std::string end;
    Body body = parse_body({}, &end);
    return body;
  }

 private:
  const Token& peek(size_t k = 0) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  const Token& next() { return t_[std::min(p_++, t_.size() - 1)]; }
  bool is_op(const std::string& op, size_t k = 0) const {
    return peek(k).kind == Tok::Op && peek(k).text == op;
  }
  bool is_name(const std::string& n, size_t k = 0) const {
    return peek(k).kind == Tok::Name && peek(k).text == n;
  }
  [[noreturn]] void error(const Token& tok, const std::string& what) const {
    fail("chat template line {}, column {}: {}", tok.line, tok.col, what);
  }
  static std::string describe(const Token& tok) {
    switch (tok.kind) {
      case Tok::End: return "end of template";
      case Tok::BlockEnd: return "'%}'";
      case Tok::VarEnd: return "'}}'";
      case Tok::Text: return "template text";
      default: return "'" + tok.text + "'";
    }
  }
  void expect_op(const std::string& op) {
    if (!is_op(op)) error(peek(), "expected '" + op + "', got " + describe(peek()));
    ++p_;
  }
  std::string expect_name() {
    if (peek().kind != Tok::Name) error(peek(), "expected a name, got " + describe(peek()));
    return next().text;
  }
  void expect_block_end() {
    if (peek().kind != Tok::BlockEnd) error(peek(), "expected '%}', got " + describe(peek()));
    ++p_;
  }

  // Parses statements until a block tag whose keyword is in `ends`; that keyword is stored in
  // *end and the parser stands after it (before the rest of that tag).
  Body parse_body(const std::set<std::string>& ends, std::string* end, const Token* opener = nullptr,
                  const std::string& opener_name = {}) {
    Body body;
    for (;;) {
      const Token& tok = peek();
      if (tok.kind == Tok::End) {
        // Reported where jinja2 reports it (the end), naming the block that is still open.
        if (!ends.empty())
          error(tok, "unexpected end of template: the '" + opener_name + "' block opened at line " +
                         std::to_string(opener->line) + ", column " + std::to_string(opener->col) +
                         " needs '{% end" + opener_name + " %}'");
        return body;
      }
      if (tok.kind == Tok::Text) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Text;
        s->text = tok.text;
        ++p_;
        body.push_back(std::move(s));
      } else if (tok.kind == Tok::VarBegin) {
        ++p_;
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Output;
        s->line = tok.line;
        s->col = tok.col;
        s->expr = parse_tuple_or_expr();
        if (peek().kind != Tok::VarEnd) error(peek(), "expected '}}', got " + describe(peek()));
        ++p_;
        body.push_back(std::move(s));
      } else if (tok.kind == Tok::BlockBegin) {
        const Token& kw = peek(1);
        if (kw.kind != Tok::Name) error(kw, "expected a statement keyword, got " + describe(kw));
        if (ends.count(kw.text)) {
          p_ += 2;
          *end = kw.text;
          return body;
        }
        p_ += 2;
        body.push_back(parse_statement(kw));
      } else {
        error(tok, "unexpected " + describe(tok));
      }
    }
  }

  std::unique_ptr<Stmt> make(Stmt::Kind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->col = at.col;
    return s;
  }

  std::unique_ptr<Stmt> parse_statement(const Token& kw) {
    const std::string& k = kw.text;
    std::string end;
    if (k == "if") {
      auto s = make(Stmt::Kind::If, kw);
      s->conds.push_back(parse_tuple_or_expr());
      expect_block_end();
      for (;;) {
        s->bodies.push_back(parse_body({"elif", "else", "endif"}, &end, &kw, "if"));
        if (end == "elif") {
          s->conds.push_back(parse_tuple_or_expr());
          expect_block_end();
        } else if (end == "else") {
          expect_block_end();
          s->bodies.push_back(parse_body({"endif"}, &end, &kw, "if"));
          break;
        } else {
          break;
        }
      }
      expect_block_end();
      return s;
    }
    if (k == "for") {
      auto s = make(Stmt::Kind::For, kw);
      s->targets.push_back(expect_name());
      while (is_op(",")) {
        ++p_;
        s->targets.push_back(expect_name());
      }
      if (!is_name("in")) error(peek(), "expected 'in' in for loop, got " + describe(peek()));
      ++p_;
      s->expr = parse_tuple_or_expr(/*no_cond=*/true);
      if (is_name("if")) {
        ++p_;
        s->cond = parse_tuple_or_expr();
      }
      if (is_name("recursive")) error(peek(), "recursive for loops are not supported");
      expect_block_end();
      s->bodies.push_back(parse_body({"else", "endfor"}, &end, &kw, "for"));
      if (end == "else") {
        expect_block_end();
        s->bodies.push_back(parse_body({"endfor"}, &end, &kw, "for"));
      } else {
        s->bodies.emplace_back();
      }
      expect_block_end();
      return s;
    }
    if (k == "set") {
      auto s = make(Stmt::Kind::Set, kw);
      s->targets.push_back(expect_name());
      if (is_op(".")) {
        ++p_;
        s->attr = expect_name();
      }
      while (is_op(",")) {
        ++p_;
        s->targets.push_back(expect_name());
      }
      if (is_op("=")) {
        ++p_;
        s->expr = parse_tuple_or_expr();
        expect_block_end();
      } else {
        expect_block_end();
        s->bodies.push_back(parse_body({"endset"}, &end, &kw, "set"));
        expect_block_end();
      }
      return s;
    }
    if (k == "macro") {
      auto s = make(Stmt::Kind::Macro, kw);
      s->text = expect_name();
      expect_op("(");
      while (!is_op(")")) {
        s->params.push_back(expect_name());
        if (is_op("=")) {
          ++p_;
          s->defaults.push_back(parse_expr());
        } else {
          s->defaults.push_back(nullptr);
        }
        if (!is_op(")")) expect_op(",");
      }
      ++p_;
      expect_block_end();
      s->bodies.push_back(parse_body({"endmacro"}, &end, &kw, "macro"));
      if (peek().kind == Tok::Name) ++p_;  // {% endmacro name %}
      expect_block_end();
      return s;
    }
    if (k == "call") {
      auto s = make(Stmt::Kind::CallBlock, kw);
      s->expr = parse_expr();
      if (s->expr->kind != Expr::Kind::Call) error(kw, "expected a macro call after 'call'");
      expect_block_end();
      s->bodies.push_back(parse_body({"endcall"}, &end, &kw, "call"));
      expect_block_end();
      return s;
    }
    if (k == "filter") {
      auto s = make(Stmt::Kind::FilterBlock, kw);
      auto placeholder = std::make_unique<Expr>();
      placeholder->kind = Expr::Kind::Literal;
      placeholder->name = "__filter_block__";  // stands for the rendered body
      s->expr = parse_filters(std::move(placeholder), true);
      expect_block_end();
      s->bodies.push_back(parse_body({"endfilter"}, &end, &kw, "filter"));
      expect_block_end();
      return s;
    }
    if (k == "break" || k == "continue") {  // placement inside a loop is checked when rendered
      auto s = make(k == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, kw);
      expect_block_end();
      return s;
    }
    if (k == "generation") {  // transformers' AssistantTracker tag: renders its body in place
      auto s = make(Stmt::Kind::Scope, kw);
      expect_block_end();
      s->bodies.push_back(parse_body({"endgeneration"}, &end, &kw, "generation"));
      expect_block_end();
      return s;
    }
    error(kw, "unknown statement '" + k + "'");
  }

  ExprPtr node(Expr::Kind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->col = at.col;
    return e;
  }

  // "a, b" without brackets is a tuple, as in {% set x = 1, 2 %}.
  ExprPtr parse_tuple_or_expr(bool no_cond = false) {
    const Token& at = peek();
    ExprPtr first = no_cond ? parse_or() : parse_expr();
    if (!is_op(",")) return first;
    auto t = node(Expr::Kind::Tuple, at);
    t->a.push_back(std::move(first));
    while (is_op(",")) {
      ++p_;
      if (peek().kind == Tok::BlockEnd || peek().kind == Tok::VarEnd) break;
      t->a.push_back(no_cond ? parse_or() : parse_expr());
    }
    return t;
  }

  ExprPtr parse_expr() {
    ExprPtr e = parse_or();
    while (is_name("if")) {
      const Token& at = next();
      auto c = node(Expr::Kind::Cond, at);
      c->a.push_back(parse_or());  // a[0] condition
      c->a.push_back(std::move(e));  // a[1] value when true
      if (is_name("else")) {
        ++p_;
        c->a.push_back(parse_expr());
      } else {
        c->a.push_back(nullptr);
      }
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(const Token& at, const std::string& op, ExprPtr l, ExprPtr r) {
    auto b = node(Expr::Kind::Binary, at);
    b->name = op;
    b->a.push_back(std::move(l));
    b->a.push_back(std::move(r));
    return b;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      const Token& at = next();
      l = binary(at, "or", std::move(l), parse_and());
    }
    return l;
  }
  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      const Token& at = next();
      l = binary(at, "and", std::move(l), parse_not());
    }
    return l;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      const Token& at = next();
      auto u = node(Expr::Kind::Unary, at);
      u->name = "not";
      u->a.push_back(parse_not());
      return u;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const Token& at = peek();
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    for (;;) {
      std::string op;
      if (peek().kind == Tok::Op && (is_op("==") || is_op("!=") || is_op("<") || is_op("<=") ||
                                     is_op(">") || is_op(">="))) {
        op = next().text;
      } else if (is_name("in")) {
        ++p_;
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        p_ += 2;
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(Expr::Kind::Compare, at);
        cmp->a.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->a.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }
  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = next();
      l = binary(at, at.text, std::move(l), parse_concat());
    }
    return l;
  }
  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    while (is_op("~")) {
      const Token& at = next();
      l = binary(at, "~", std::move(l), parse_math2());
    }
    return l;
  }
  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = next();
      l = binary(at, at.text, std::move(l), parse_pow());
    }
    return l;
  }
  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (is_op("**")) {
      const Token& at = next();
      l = binary(at, "**", std::move(l), parse_unary(true));
    }
    return l;
  }
  ExprPtr parse_unary(bool with_filter) {
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& at = next();
      e = node(Expr::Kind::Unary, at);
      e->name = at.text;
      e->a.push_back(parse_unary(false));
    } else {
      e = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filters(std::move(e), false) : std::move(e);
  }

  ExprPtr parse_primary() {
    const Token& tok = next();
    switch (tok.kind) {
      case Tok::Name: {
        auto e = node(Expr::Kind::Literal, tok);
        if (tok.text == "true" || tok.text == "True") e->value = Value::boolean(true);
        else if (tok.text == "false" || tok.text == "False") e->value = Value::boolean(false);
        else if (tok.text == "none" || tok.text == "None") e->value = Value::none();
        else {
          e->kind = Expr::Kind::Name;
          e->name = tok.text;
        }
        return e;
      }
      case Tok::String: {
        auto e = node(Expr::Kind::Literal, tok);
        std::string s = tok.text;
        while (peek().kind == Tok::String) s += next().text;  // "a" "b" concatenates
        e->value = Value::string(s);
        return e;
      }
      case Tok::Int: {
        auto e = node(Expr::Kind::Literal, tok);
        e->value = Value::integer(std::stoll(tok.text));
        return e;
      }
      case Tok::Float: {
        auto e = node(Expr::Kind::Literal, tok);
        e->value = Value::number(std::stod(tok.text));
        return e;
      }
      case Tok::Op:
        if (tok.text == "(") {
          if (is_op(")")) {
            ++p_;
            return node(Expr::Kind::Tuple, tok);
          }
          ExprPtr e = parse_expr();
          if (is_op(",")) {
            auto t = node(Expr::Kind::Tuple, tok);
            t->a.push_back(std::move(e));
            while (is_op(",")) {
              ++p_;
              if (is_op(")")) break;
              t->a.push_back(parse_expr());
            }
            e = std::move(t);
          }
          expect_op(")");
          return e;
        }
        if (tok.text == "[") {
          auto e = node(Expr::Kind::List, tok);
          while (!is_op("]")) {
            e->a.push_back(parse_expr());
            if (!is_op("]")) expect_op(",");
          }
          ++p_;
          return e;
        }
        if (tok.text == "{") {
          auto e = node(Expr::Kind::Dict, tok);
          while (!is_op("}")) {
            e->a.push_back(parse_expr());
            expect_op(":");
            e->a.push_back(parse_expr());
            if (!is_op("}")) expect_op(",");
          }
          ++p_;
          return e;
        }
        break;
      default: break;
    }
    error(tok, "unexpected " + describe(tok) + " in expression");
  }

  void parse_call_args(Expr& call) {
    // Positional arguments come first; the names of keyword arguments are kept in order.
    while (!is_op(")")) {
      if (peek().kind == Tok::Name && is_op("=", 1)) {
        call.kwnames.push_back(next().text);
        ++p_;
        call.a.push_back(parse_expr());
      } else {
        if (!call.kwnames.empty()) error(peek(), "positional argument after keyword argument");
        call.a.push_back(parse_expr());
      }
      if (!is_op(")")) expect_op(",");
    }
    ++p_;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      if (is_op(".")) {
        const Token& at = next();
        auto a = node(Expr::Kind::Attr, at);
        if (peek().kind == Tok::Int) {  // foo.0 is foo[0]
          a->kind = Expr::Kind::Item;
          a->a.push_back(std::move(e));
          auto idx = node(Expr::Kind::Literal, peek());
          idx->value = Value::integer(std::stoll(next().text));
          a->a.push_back(std::move(idx));
        } else {
          a->name = expect_name();
          a->a.push_back(std::move(e));
        }
        e = std::move(a);
      } else if (is_op("[")) {
        const Token& at = next();
        ExprPtr parts[3];
        int colons = 0;
        while (!is_op("]")) {
          if (is_op(":")) {
            ++p_;
            if (++colons > 2) error(at, "too many ':' in slice");
            continue;
          }
          if (parts[colons]) error(peek(), "expected ']' or ':' in subscript");
          parts[colons] = parse_expr();
        }
        ++p_;
        if (colons == 0) {
          if (!parts[0]) error(at, "empty subscript");
          auto it = node(Expr::Kind::Item, at);
          it->a.push_back(std::move(e));
          it->a.push_back(std::move(parts[0]));
          e = std::move(it);
        } else {
          auto sl = node(Expr::Kind::Slice, at);
          sl->a.push_back(std::move(e));
          for (auto& part : parts) sl->a.push_back(std::move(part));
          e = std::move(sl);
        }
      } else if (is_op("(")) {
        const Token& at = next();
        auto c = node(Expr::Kind::Call, at);
        c->a.push_back(std::move(e));
        parse_call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  // "| name(args)" and "is [not] name(args)" chains; a filter block starts with the name.
  ExprPtr parse_filters(ExprPtr e, bool starts_with_name) {
    for (;;) {
      if (is_op("|") || starts_with_name) {
        const Token& at = starts_with_name ? peek() : next();
        starts_with_name = false;
        auto f = node(Expr::Kind::Filter, at);
        f->name = expect_name();
        while (is_op(".")) {
          ++p_;
          f->name.append(".").append(expect_name());
        }
        f->a.push_back(std::move(e));
        if (is_op("(")) {
          ++p_;
          parse_call_args(*f);
        }
        e = std::move(f);
      } else if (is_name("is")) {
        const Token& at = next();
        auto t = node(Expr::Kind::Test, at);
        if (is_name("not")) {
          ++p_;
          t->negated = true;
        }
        t->name = expect_name();
        t->a.push_back(std::move(e));
        if (is_op("(")) {
          ++p_;
          parse_call_args(*t);
        } else if (peek().kind == Tok::String || peek().kind == Tok::Int ||
                   peek().kind == Tok::Float ||
                   (peek().kind == Tok::Name && !is_name("and") && !is_name("or") &&
                    !is_name("else") && !is_name("if") && !is_name("is") && !is_name("in") &&
                    !is_name("not"))) {
          t->a.push_back(parse_primary());  // "is sameas none", "is divisibleby 3"
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  size_t p_ = 0;
};

}  // namespace

Body parse_template(const std::string& source) { return Parser(lex(source)).parse_all(); }

}  // namespace vkf::tokenizer::jinja
