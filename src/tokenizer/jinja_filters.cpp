// jinja2's built-in filters and tests with the behaviour of jinja2 3.1, plus transformers' own
// tojson filter (json.dumps with ensure_ascii=False) that replaces jinja2's HTML-safe one.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja_builtins.h"

namespace vkf::tokenizer::jinja {
namespace {


ValueList as_list(const Value& v, const char* filter) {
  ValueList items;
  if (!iterate(v, &items))
    throw TemplateError(std::string("filter '") + filter + "': '" + kind_name(v.kind) +
                        "' object is not iterable");
  return items;
}

// "a.b.0" attribute paths, as jinja2's make_attrgetter resolves them.
Value attr_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t k = 0;
  for (;;) {
    size_t dot = path.find('.', k);
    std::string part = path.substr(k, dot == std::string::npos ? std::string::npos : dot - k);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = numeric ? get_item(cur, Value::integer(std::stoll(part))) : get_item(cur, Value::string(part));
    if (dot == std::string::npos) return cur;
    k = dot + 1;
  }
}

// Arguments after the first `skip` positional ones, for filters that forward to a test/filter.
CallArgs rest_args(const CallArgs& a, size_t skip) {
  CallArgs r;
  for (size_t k = skip; k < a.pos.size(); ++k) r.pos.push_back(a.pos[k]);
  r.kw = a.kw;
  return r;
}

Value select_like(const Value& v, const CallArgs& a, bool by_attr, bool keep) {
  ValueList items = as_list(v, by_attr ? "selectattr" : "select");
  ValueList out;
  size_t skip = by_attr ? 1 : 0;
  std::string attr;
  if (by_attr) {
    if (a.pos.empty() || !a.pos[0].is_string()) throw TemplateError("selectattr needs an attribute name");
    attr = a.pos[0].s;
  }
  std::string test = a.pos.size() > skip && a.pos[skip].is_string() ? a.pos[skip].s : "";
  CallArgs targs = rest_args(a, skip + 1);
  for (const auto& item : items) {
    Value x = by_attr ? attr_path(item, attr) : item;
    bool ok = test.empty() ? truthy(x) : apply_test(test, x, targs);
    if (ok == keep) out.push_back(item);
  }
  return Value::make_list(std::move(out));
}

bool sort_less(const Value& x, const Value& y, bool case_sensitive) {
  std::string err;
  bool r = (!case_sensitive && x.is_string() && y.is_string())
               ? py_lower(x.s) < py_lower(y.s)
               : less_than(x, y, &err);
  if (!err.empty()) throw TemplateError(err);
  return r;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  size_t k = 0;
  while (k < s.size()) {
    size_t e = s.find('\n', k);
    if (e == std::string::npos) {
      lines.push_back(s.substr(k));
      break;
    }
    lines.push_back(s.substr(k, e - k));
    k = e + 1;
  }
  return lines;
}

Value indent(const Value& v, const CallArgs& a) {
  const Value* w = a.get(0, "width");
  const Value* first = a.get(1, "first");
  const Value* blank = a.get(2, "blank");
  std::string ind = !w ? "    " : w->is_string() ? w->s : std::string(static_cast<size_t>(w->i), ' ');
  std::string s = to_str(v) + "\n";  // jinja2 appends a newline so splitlines keeps a last blank
  std::vector<std::string> lines = split_lines(s);
  std::string rv;
  if (blank && truthy(*blank)) {
    for (size_t k = 0; k < lines.size(); ++k) {
      if (k) rv.append("\n").append(ind);
      rv.append(lines[k]);
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t k = 1; k < lines.size(); ++k) {
      rv.append("\n");
      if (!lines[k].empty()) rv.append(ind).append(lines[k]);
    }
  }
  if (first && truthy(*first)) rv = ind + rv;
  return Value::string(rv);
}

}  // namespace

std::string percent_format(const std::string& fmt, const ValueList& args) {
  std::string out;
  size_t next = 0;
  for (size_t k = 0; k < fmt.size(); ++k) {
    if (fmt[k] != '%') {
      out += fmt[k];
      continue;
    }
    if (++k >= fmt.size()) throw TemplateError("incomplete format");
    char c = fmt[k];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (next >= args.size()) throw TemplateError("not enough arguments for format string");
    const Value& a = args[next++];
    if (c == 's') {
      out += to_str(a);
    } else if (c == 'r') {
      out += to_repr(a);
    } else if (c == 'd' || c == 'i') {
      if (!a.is_number()) throw TemplateError(std::string("%d format: a real number is required, not ") + kind_name(a.kind));
      out += std::to_string(a.kind == Value::Kind::Float ? static_cast<int64_t>(a.f)
                            : a.kind == Value::Kind::Bool ? int64_t{a.b} : a.i);
    } else if (c == 'f') {
      if (!a.is_number()) throw TemplateError("%f format: a real number is required");
      char b[64];
      std::snprintf(b, sizeof(b), "%.6f", a.as_double());
      out += b;
    } else {
      throw TemplateError(std::string("unsupported format character '") + c + "'");
    }
  }
  if (next != args.size()) throw TemplateError("not all arguments converted during string formatting");
  return out;
}

Value apply_filter(const std::string& name, const Value& v, const CallArgs& a) {
  if (name == "default" || name == "d") {
    const Value* def = a.get(0, "default_value");
    const Value* boolean = a.get(1, "boolean");
    bool use = v.is_undefined() || (boolean && truthy(*boolean) && !truthy(v));
    return use ? (def ? *def : Value::string("")) : v;
  }
  if (name == "safe") return v;
  if (name == "tojson") {
    const Value* ind = a.get(0, "indent");
    const Value* sk = a.get(3, "sort_keys");
    if (v.is_undefined()) undefined_error(v);
    return Value::string(to_json(v, ind && ind->kind == Value::Kind::Int ? static_cast<int>(ind->i) : -1,
                                 sk && truthy(*sk)));
  }
  if (name == "length" || name == "count") {
    int64_t n = length(v);
    if (n < 0) throw TemplateError(std::string("object of type '") + kind_name(v.kind) + "' has no len()");
    return Value::integer(n);
  }
  if (name == "string") return v.is_string() ? v : Value::string(to_str(v));
  if (name == "list") return Value::make_list(as_list(v, "list"));
  if (name == "first" || name == "last") {
    ValueList items = as_list(v, name.c_str());
    if (items.empty()) return Value::undefined("first");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (v.is_string()) {
      auto chars = utf8_chars(v.s);
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
      return Value::string(out);
    }
    ValueList items = as_list(v, "reverse");
    std::reverse(items.begin(), items.end());
    return Value::make_list(std::move(items));
  }
  if (name == "join") {
    const Value* d = a.get(0, "d");
    const Value* attr = a.get(1, "attribute");
    std::string out;
    ValueList items = as_list(v, "join");
    for (size_t k = 0; k < items.size(); ++k) {
      if (k) out += d ? to_str(*d) : "";
      out += to_str(attr && attr->is_string() ? attr_path(items[k], attr->s) : items[k]);
    }
    return Value::string(out);
  }
  if (name == "map") {
    ValueList items = as_list(v, "map");
    ValueList out;
    const Value* attr = nullptr;
    for (const auto& [k, x] : a.kw)
      if (k == "attribute") attr = &x;
    if (attr) {
      const Value* def = nullptr;
      for (const auto& [k, x] : a.kw)
        if (k == "default") def = &x;
      for (const auto& it : items) {
        Value r = attr_path(it, to_str(*attr));
        out.push_back(r.is_undefined() && def ? *def : r);
      }
    } else {
      if (a.pos.empty() || !a.pos[0].is_string()) throw TemplateError("map needs a filter name or attribute=");
      CallArgs fargs = rest_args(a, 1);
      for (const auto& it : items) out.push_back(apply_filter(a.pos[0].s, it, fargs));
    }
    return Value::make_list(std::move(out));
  }
  if (name == "select") return select_like(v, a, false, true);
  if (name == "reject") return select_like(v, a, false, false);
  if (name == "selectattr") return select_like(v, a, true, true);
  if (name == "rejectattr") return select_like(v, a, true, false);
  if (name == "items") {
    if (v.is_undefined()) return Value::make_list();
    if (!v.is_mapping()) throw TemplateError("filter 'items' expects a mapping");
    ValueList out;
    for (const auto& [k, x] : *v.dict) out.push_back(Value::make_tuple({Value::string(k), x}));
    return Value::make_list(std::move(out));
  }
  if (name == "dictsort") {
    if (!v.is_mapping()) throw TemplateError("filter 'dictsort' expects a mapping");
    ValueList out;
    for (const auto& [k, x] : *v.dict) out.push_back(Value::make_tuple({Value::string(k), x}));
    std::stable_sort(out.begin(), out.end(), [](const Value& x, const Value& y) {
      return sort_less((*x.list)[0], (*y.list)[0], false);
    });
    return Value::make_list(std::move(out));
  }
  if (name == "sort") {
    ValueList items = as_list(v, "sort");
    const Value* rev = a.get(0, "reverse");
    const Value* cs = a.get(1, "case_sensitive");
    const Value* attr = a.get(2, "attribute");
    bool case_sensitive = cs && truthy(*cs);
    auto key = [&](const Value& x) { return attr && attr->is_string() ? attr_path(x, attr->s) : x; };
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      return sort_less(key(x), key(y), case_sensitive);
    });
    if (rev && truthy(*rev)) std::reverse(items.begin(), items.end());
    return Value::make_list(std::move(items));
  }
  if (name == "unique") {
    ValueList items = as_list(v, "unique");
    const Value* cs = a.get(0, "case_sensitive");
    ValueList out;
    std::vector<Value> seen;
    for (const auto& it : items) {
      Value k = (!(cs && truthy(*cs)) && it.is_string()) ? Value::string(py_lower(it.s)) : it;
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) {
        seen.push_back(k);
        out.push_back(it);
      }
    }
    return Value::make_list(std::move(out));
  }
  if (name == "sum") {
    ValueList items = as_list(v, "sum");
    bool is_float = false;
    int64_t i = 0;
    double f = 0;
    for (const auto& it : items) {
      if (!it.is_number()) throw TemplateError("filter 'sum' expects numbers");
      if (it.kind == Value::Kind::Float) is_float = true;
      i += it.kind == Value::Kind::Bool ? it.b : it.i;
      f += it.as_double();
    }
    return is_float ? Value::number(f) : Value::integer(i);
  }
  if (name == "max" || name == "min") {
    ValueList items = as_list(v, name.c_str());
    if (items.empty()) return Value::undefined(name);
    Value best = items[0];
    for (const auto& it : items) {
      bool better = name == "max" ? sort_less(best, it, false) : sort_less(it, best, false);
      if (better) best = it;
    }
    return best;
  }
  if (name == "abs") {
    if (v.kind == Value::Kind::Int) return Value::integer(v.i < 0 ? -v.i : v.i);
    if (v.kind == Value::Kind::Float) return Value::number(std::fabs(v.f));
    throw TemplateError("filter 'abs' expects a number");
  }
  if (name == "int") {
    const Value* def = a.get(0, "default");
    Value fallback = def ? *def : Value::integer(0);
    if (v.kind == Value::Kind::Int) return v;
    if (v.kind == Value::Kind::Bool) return Value::integer(v.b);
    if (v.kind == Value::Kind::Float) return Value::integer(static_cast<int64_t>(v.f));
    if (v.is_string()) {
      try {
        size_t used = 0;
        std::string t = v.s;
        int64_t x = std::stoll(t, &used);
        if (used == t.size()) return Value::integer(x);
        double d = std::stod(t, &used);
        if (used == t.size()) return Value::integer(static_cast<int64_t>(d));
      } catch (const std::exception&) {
      }
    }
    return fallback;
  }
  if (name == "float") {
    const Value* def = a.get(0, "default");
    if (v.is_number()) return Value::number(v.as_double());
    if (v.is_string()) {
      try {
        size_t used = 0;
        double d = std::stod(v.s, &used);
        if (used == v.s.size()) return Value::number(d);
      } catch (const std::exception&) {
      }
    }
    return def ? *def : Value::number(0.0);
  }
  if (name == "round") {
    const Value* p = a.get(0, "precision");
    const Value* method = a.get(1, "method");
    if (!v.is_number()) throw TemplateError("filter 'round' expects a number");
    double scale = std::pow(10.0, p ? p->as_double() : 0.0);
    std::string m = method ? to_str(*method) : "common";
    double x = v.as_double() * scale;
    // "common" is Python's round(): halves go to the even neighbour (round(2.5) == 2).
    double r = m == "ceil" ? std::ceil(x) : m == "floor" ? std::floor(x) : std::nearbyint(x);
    return Value::number(r / scale);
  }
  if (name == "indent") return indent(v, a);
  if (name == "format") return Value::string(percent_format(to_str(v), a.pos));
  if (name == "e" || name == "escape") return Value::string(html_escape(to_str(v)));
  std::string s = to_str(v);
  if (name == "trim") {
    CallArgs sa;
    sa.pos = {a.get(0, "chars") ? *a.get(0, "chars") : Value::none()};
    return (*get_attr(Value::string(s), "strip").fn)(sa);
  }
  if (name == "upper") return Value::string(py_upper(s));
  if (name == "lower") return Value::string(py_lower(s));
  if (name == "capitalize") return Value::string(py_capitalize(s));
  if (name == "title") {
    // jinja2 splits at runs of whitespace, '-', and opening brackets; each piece is capitalised.
    std::vector<uint32_t> cps = utf8_decode(s);
    bool start = true;
    for (auto& c : cps) {
      bool sep = is_py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
      if (!sep) c = start ? to_upper_cp(c) : to_lower_cp(c);
      start = sep;
    }
    return Value::string(utf8_encode(cps));
  }
  if (name == "replace") {
    CallArgs ra;
    ra.pos = {a.get(0, "old") ? *a.get(0, "old") : Value::none(),
              a.get(1, "new") ? *a.get(1, "new") : Value::none()};
    if (const Value* c = a.get(2, "count")) ra.pos.push_back(*c);
    ra.pos[0] = Value::string(to_str(ra.pos[0]));
    ra.pos[1] = Value::string(to_str(ra.pos[1]));
    return (*get_attr(Value::string(s), "replace").fn)(ra);
  }
  if (name == "wordcount") {
    CallArgs none;
    return Value::integer(length((*get_attr(Value::string(s), "split").fn)(none)));
  }
  throw TemplateError("no filter named '" + name + "'");
}

bool apply_test(const std::string& name, const Value& v, const CallArgs& a) {
  using K = Value::Kind;
  auto arg = [&]() -> const Value& {
    if (a.pos.empty()) throw TemplateError("test '" + name + "' needs an argument");
    return a.pos[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.kind == K::Dict;
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == K::Int;
  if (name == "float") return v.kind == K::Float;
  if (name == "boolean") return v.kind == K::Bool;
  if (name == "true") return v.kind == K::Bool && v.b;
  if (name == "false") return v.kind == K::Bool && !v.b;
  if (name == "iterable") return v.kind == K::Undefined || v.is_string() || v.is_list() || v.kind == K::Dict;
  if (name == "sequence") return v.is_string() || v.is_list() || v.kind == K::Dict;
  if (name == "callable") return v.kind == K::Function;
  if (name == "lower" || name == "upper") {  // str.islower()/isupper(): needs a cased letter
    if (!v.is_string() || py_lower(v.s) == py_upper(v.s)) return false;
    return name == "lower" ? py_lower(v.s) == v.s : py_upper(v.s) == v.s;
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (v.kind != K::Int) throw TemplateError("test '" + name + "' expects an integer");
    int64_t m = name == "divisibleby" ? arg().i : 2;
    if (m == 0) throw TemplateError("integer division or modulo by zero");
    int64_t r = ((v.i % m) + m) % m;
    return name == "odd" ? r == 1 : r == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, arg());
  if (name == "ne" || name == "!=") return !equals(v, arg());
  if (name == "sameas") {
    const Value& o = arg();
    if (v.kind != o.kind) return false;
    if (v.kind == K::None || v.kind == K::Bool) return v.b == o.b;
    if (v.is_list()) return v.list == o.list;
    if (v.is_mapping()) return v.dict == o.dict;
    return equals(v, o);
  }
  if (name == "lt" || name == "le" || name == "gt" || name == "ge" || name == "<" || name == ">" ||
      name == "<=" || name == ">=") {
    std::string err;
    const Value& o = arg();
    bool r = (name == "lt" || name == "<")    ? less_than(v, o, &err)
             : (name == "gt" || name == ">")  ? less_than(o, v, &err)
             : (name == "le" || name == "<=") ? !less_than(o, v, &err)
                                              : !less_than(v, o, &err);
    if (!err.empty()) throw TemplateError(err);
    return r;
  }
  if (name == "in") {
    const Value& o = arg();
    if (o.is_string() && v.is_string()) return o.s.find(v.s) != std::string::npos;
    ValueList items;
    if (!iterate(o, &items)) throw TemplateError("argument of test 'in' is not iterable");
    return std::any_of(items.begin(), items.end(), [&](const Value& x) { return equals(x, v); });
  }
  throw TemplateError("no test named '" + name + "'");
}

}  // namespace vkf::tokenizer::jinja
