// Syntax tree of a parsed Jinja template, and the parser entry point. One generic node type per
// layer (expressions, statements) keeps the interpreter a plain switch over node kinds.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace vkf::tokenizer::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,   // value
    Name,      // name
    Attr,      // a[0].name
    Item,      // a[0][a[1]]
    Slice,     // a[0][a[1]:a[2]:a[3]] (null children for omitted parts)
    Call,      // a[0](a[1..]) with kwnames aligned to the trailing keyword arguments
    Filter,    // a[0] | name(a[1..])
    Test,      // a[0] is [not] name(a[1..])
    Unary,     // name in {"-", "+", "not"}
    Binary,    // a[0] name a[1]; name is the operator, including "and", "or", "in", "not in"
    Compare,   // a[0] ops[0] a[1] ops[1] a[2] ...
    Cond,      // a[1] if a[0] else a[2] (a[2] may be null)
    List,
    Tuple,
    Dict,      // a[2k] key, a[2k+1] value
  };
  Kind kind;
  int line = 0;
  int col = 0;
  std::string name;
  bool negated = false;
  Value value;
  std::vector<ExprPtr> a;
  std::vector<std::string> kwnames;  // names of the last kwnames.size() arguments
  std::vector<std::string> ops;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    Text,      // text
    Output,    // {{ expr }}
    If,        // conds[k] -> bodies[k]; bodies.size() == conds.size() + 1 when there is an else
    For,       // targets in expr [if cond]; bodies[0] loop, bodies[1] else
    Set,       // targets (or target attr) = expr; with no expr, bodies[0] is captured
    Macro,     // name(params = defaults) bodies[0]
    CallBlock, // {% call macro(args) %}bodies[0]{% endcall %}; expr is the call
    FilterBlock,  // {% filter name %}bodies[0]{% endfilter %}; expr is the filter applied to a
                  // placeholder literal
    Break,
    Continue,
    Scope,     // bodies[0] rendered in place ({% generation %} blocks)
  };
  Kind kind;
  int line = 0;
  int col = 0;
  std::string text;
  std::vector<std::string> targets;
  std::string attr;  // for "set ns.attr = ..."
  ExprPtr expr;
  ExprPtr cond;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // aligned with params; null when no default
};

// Parses the whole template; throws vkf::Error naming line and column on malformed input.
Body parse_template(const std::string& source);

}  // namespace vkf::tokenizer::jinja
