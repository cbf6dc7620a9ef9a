// Runtime values of the Jinja interpreter used for chat templates. They model the Python objects
// that jinja2 sees when transformers renders a template (None, bool, int, float, str, list, dict,
// jinja2's Undefined, namespace() objects and callables), because the rendered bytes depend on
// Python's str()/repr() of those objects and on Python's comparison and truth rules.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace vkf::tokenizer::jinja {

struct Value;
using ValueList = std::vector<Value>;
// Insertion-ordered, like a Python dict: templates print and iterate dicts in that order.
using ValueDict = std::vector<std::pair<std::string, Value>>;

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  const Value* get(size_t index, const std::string& name) const;
};
using NativeFn = std::function<Value(const CallArgs&)>;

struct Value {
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Function };
  Kind kind = Kind::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;  // string value, or the missing name of an Undefined
  // Lists, dicts and namespaces are shared by reference, as in Python: a namespace handed to a
  // loop body is the same object after the loop, which is the whole point of namespace().
  std::shared_ptr<ValueList> list;
  std::shared_ptr<ValueDict> dict;
  std::shared_ptr<NativeFn> fn;
  bool is_tuple = false;  // only changes repr(): ('a', 1) instead of ['a', 1]

  static Value undefined(std::string name = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value make_list(ValueList items = {});
  static Value make_tuple(ValueList items);
  static Value make_dict(ValueDict items = {});
  static Value make_namespace(ValueDict items = {});
  static Value function(NativeFn f);
  static Value from_json(const nlohmann::json& j);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  bool is_mapping() const { return kind == Kind::Dict || kind == Kind::Namespace; }
  bool is_list() const { return kind == Kind::List; }
  double as_double() const;

  // ValueDict lookup; nullptr when absent.
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);
};

const char* kind_name(Value::Kind kind);
bool truthy(const Value& v);
// Python str() of the value, as jinja2 prints it ({{ x }}); Undefined prints as "".
std::string to_str(const Value& v);
// Python repr(), used for items inside printed lists and dicts.
std::string to_repr(const Value& v);
// Python repr() of a float: shortest round-trip digits, 'inf', '1e+16' style exponents.
std::string float_repr(double d);
// transformers' tojson filter: json.dumps(x, ensure_ascii=False, indent=indent) with Python's
// default separators (", " and ": " without indent, "," and ": " with it).
std::string to_json(const Value& v, int indent, bool sort_keys);
// Python ==, where 1 == 1.0 == True and containers compare element-wise.
bool equals(const Value& a, const Value& b);
// Python <; throws (via the message out-parameter) when the types cannot be ordered.
bool less_than(const Value& a, const Value& b, std::string* error);
// Items a for loop sees: list elements, dict keys, string characters (UTF-8 code points).
bool iterate(const Value& v, ValueList* out);
// Number of elements / code points, or -1 when the value has no length.
int64_t length(const Value& v);
std::vector<std::string> utf8_chars(const std::string& s);
// Code points of a UTF-8 string, and back (invalid bytes pass through as Latin-1 code points).
std::vector<uint32_t> utf8_decode(const std::string& s);
std::string utf8_encode(const std::vector<uint32_t>& cps);
// Python's str.isspace() for one code point (Unicode whitespace, not just ASCII).
bool is_py_space(uint32_t cp);
// Simple one-to-one case mapping for Latin-1, Latin Extended-A, Greek and Cyrillic letters,
// the scripts whose letters Python's upper()/lower() change without changing the length.
uint32_t to_upper_cp(uint32_t cp);
uint32_t to_lower_cp(uint32_t cp);
bool is_alpha_cp(uint32_t cp);

}  // namespace vkf::tokenizer::jinja
