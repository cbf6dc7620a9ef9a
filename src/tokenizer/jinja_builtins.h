// jinja2's built-in filters and tests, Python's str/dict methods that chat templates call, and
// attribute/subscript lookup with jinja2's rules (attribute first for ".", item first for "[]").
#pragma once

#include <stdexcept>
#include <string>

#include "tokenizer/jinja_value.h"

namespace vkf::tokenizer::jinja {

// A runtime error without a location; the renderer adds the template line and column.
struct TemplateError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

Value apply_filter(const std::string& name, const Value& v, const CallArgs& args);
bool apply_test(const std::string& name, const Value& v, const CallArgs& args);
// obj.name: string/dict/list methods come back as bound functions, dict keys otherwise.
Value get_attr(const Value& obj, const std::string& name);
// obj[key]: dict keys, list/string indices (negative from the end).
Value get_item(const Value& obj, const Value& key);
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// Python's str.upper()/lower()/capitalize()/title() (see to_upper_cp for the scripts covered).
std::string py_upper(const std::string& s);
std::string py_lower(const std::string& s);
std::string py_capitalize(const std::string& s);
std::string py_title(const std::string& s);
// Python's printf-style "fmt % args" (%s %r %d %i %f %%), for the format filter and "%".
std::string percent_format(const std::string& fmt, const ValueList& args);
// Raises TemplateError when an Undefined is used where jinja2 raises UndefinedError.
[[noreturn]] void undefined_error(const Value& v);

}  // namespace vkf::tokenizer::jinja
