// Attribute and subscript lookup with jinja2's rules, slicing, and the Python str/dict methods
// that chat templates call (message.content.strip(), tool.get('x'), text.split('</think>')...).
#include <algorithm>
#include <cctype>
#include <optional>

#include "tokenizer/jinja_builtins.h"

namespace vkf::tokenizer::jinja {
namespace {

std::string strip_chars(const std::string& s, const Value* chars, bool left, bool right) {
  // Code-point based, as Python: no argument strips Unicode whitespace, else the given set.
  std::vector<uint32_t> cps = utf8_decode(s);
  std::vector<uint32_t> set;
  bool use_set = chars && !chars->is_none();
  if (use_set) set = utf8_decode(chars->s);
  auto drop = [&](uint32_t c) {
    return use_set ? std::find(set.begin(), set.end(), c) != set.end() : is_py_space(c);
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && drop(cps[b])) ++b;
  if (right)
    while (e > b && drop(cps[e - 1])) --e;
  return utf8_encode(std::vector<uint32_t>(cps.begin() + static_cast<long>(b), cps.begin() + static_cast<long>(e)));
}

std::string need_str(const Value* v, const char* what) {
  if (!v || !v->is_string()) throw TemplateError(std::string(what) + " expects a string argument");
  return v->s;
}

Value split(const std::string& s, const Value* sep, const Value* maxsplit_v) {
  int64_t maxsplit = maxsplit_v && maxsplit_v->kind == Value::Kind::Int ? maxsplit_v->i : -1;
  ValueList out;
  if (!sep || sep->is_none()) {  // Python's whitespace split: runs of whitespace, no empties
    std::vector<uint32_t> cps = utf8_decode(s);
    size_t k = 0, n = cps.size();
    auto piece = [&](size_t b, size_t e) {
      return Value::string(utf8_encode(std::vector<uint32_t>(cps.begin() + static_cast<long>(b),
                                                             cps.begin() + static_cast<long>(e))));
    };
    while (k < n) {
      while (k < n && is_py_space(cps[k])) ++k;
      if (k >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = n;
        while (e > k && is_py_space(cps[e - 1])) --e;
        out.push_back(piece(k, e));
        break;
      }
      size_t e = k;
      while (e < n && !is_py_space(cps[e])) ++e;
      out.push_back(piece(k, e));
      k = e;
    }
    return Value::make_list(std::move(out));
  }
  const std::string& d = sep->s;
  if (d.empty()) throw TemplateError("empty separator");
  size_t k = 0;
  for (;;) {
    size_t f = s.find(d, k);
    if (f == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) {
      out.push_back(Value::string(s.substr(k)));
      break;
    }
    out.push_back(Value::string(s.substr(k, f - k)));
    k = f + d.size();
  }
  return Value::make_list(std::move(out));
}

bool affix_match(const std::string& s, const Value& arg, bool prefix) {
  auto one = [&](const std::string& a) {
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (arg.is_list()) {
    for (const auto& e : *arg.list)
      if (e.is_string() && one(e.s)) return true;
    return false;
  }
  if (!arg.is_string()) throw TemplateError("startswith/endswith expects a string or a tuple");
  return one(arg.s);
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                        int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between every character
    auto chars = utf8_chars(s);
    int64_t done = 0;
    for (const auto& c : chars) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      out += c;
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  size_t k = 0;
  int64_t done = 0;
  for (;;) {
    size_t f = s.find(from, k);
    if (f == std::string::npos || (count >= 0 && done >= count)) break;
    out += s.substr(k, f - k) + to;
    k = f + from.size();
    ++done;
  }
  return out + s.substr(k);
}

}  // namespace

std::string py_upper(const std::string& s) {
  std::vector<uint32_t> out;
  for (uint32_t c : utf8_decode(s)) {
    if (c == 0xdf) {  // Python upper-cases the sharp s to two letters
      out.push_back('S');
      out.push_back('S');
    } else {
      out.push_back(to_upper_cp(c));
    }
  }
  return utf8_encode(out);
}

std::string py_lower(const std::string& s) {
  std::vector<uint32_t> cps = utf8_decode(s);
  for (auto& c : cps) c = to_lower_cp(c);
  return utf8_encode(cps);
}

std::string py_capitalize(const std::string& s) {
  std::vector<uint32_t> cps = utf8_decode(s);
  for (size_t k = 0; k < cps.size(); ++k) cps[k] = k ? to_lower_cp(cps[k]) : to_upper_cp(cps[k]);
  return utf8_encode(cps);
}

// Python's str.title(): a cased letter is upper-cased when it follows an uncased character.
std::string py_title(const std::string& s) {
  std::vector<uint32_t> cps = utf8_decode(s);
  bool prev_cased = false;
  for (auto& c : cps) {
    bool cased = to_upper_cp(c) != c || to_lower_cp(c) != c;
    if (cased) c = prev_cased ? to_lower_cp(c) : to_upper_cp(c);
    prev_cased = cased;
  }
  return utf8_encode(cps);
}

namespace {

Value string_method(const std::string& s, const std::string& name) {
  auto m = [s](auto fn) { return Value::function([s, fn](const CallArgs& a) { return fn(s, a); }); };
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return m([name](const std::string& x, const CallArgs& a) {
      return Value::string(strip_chars(x, a.get(0, "chars"), name != "rstrip", name != "lstrip"));
    });
  if (name == "split")
    return m([](const std::string& x, const CallArgs& a) {
      return split(x, a.get(0, "sep"), a.get(1, "maxsplit"));
    });
  if (name == "startswith" || name == "endswith")
    return m([name](const std::string& x, const CallArgs& a) {
      const Value* arg = a.get(0, "prefix");
      if (!arg) throw TemplateError(name + "() takes at least 1 argument");
      return Value::boolean(affix_match(x, *arg, name == "startswith"));
    });
  if (name == "upper" || name == "lower")
    return m([name](const std::string& x, const CallArgs&) {
      return Value::string(name == "upper" ? py_upper(x) : py_lower(x));
    });
  if (name == "title")
    return m([](const std::string& x, const CallArgs&) { return Value::string(py_title(x)); });
  if (name == "capitalize")
    return m([](const std::string& x, const CallArgs&) { return Value::string(py_capitalize(x)); });
  if (name == "replace")
    return m([](const std::string& x, const CallArgs& a) {
      const Value* c = a.get(2, "count");
      return Value::string(replace_all(x, need_str(a.get(0, "old"), "replace()"),
                                       need_str(a.get(1, "new"), "replace()"),
                                       c && c->kind == Value::Kind::Int ? c->i : -1));
    });
  if (name == "find" || name == "count" || name == "rfind")
    return m([name](const std::string& x, const CallArgs& a) {
      std::string sub = need_str(a.get(0, "sub"), "find()");
      if (name == "find") {
        size_t f = x.find(sub);
        return Value::integer(f == std::string::npos ? -1 : static_cast<int64_t>(utf8_chars(x.substr(0, f)).size()));
      }
      if (name == "rfind") {
        size_t f = x.rfind(sub);
        return Value::integer(f == std::string::npos ? -1 : static_cast<int64_t>(utf8_chars(x.substr(0, f)).size()));
      }
      if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_chars(x).size()) + 1);
      int64_t n = 0;
      for (size_t k = x.find(sub); k != std::string::npos; k = x.find(sub, k + sub.size())) ++n;
      return Value::integer(n);
    });
  if (name == "join")
    return m([](const std::string& x, const CallArgs& a) {
      const Value* it = a.get(0, "iterable");
      ValueList items;
      if (!it || !iterate(*it, &items)) throw TemplateError("join() expects an iterable");
      std::string out;
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += x;
        if (!items[k].is_string()) throw TemplateError("join() expects strings");
        out += items[k].s;
      }
      return Value::string(out);
    });
  if (name == "splitlines")
    return m([](const std::string& x, const CallArgs&) {
      ValueList out;
      size_t k = 0;
      while (k < x.size()) {
        size_t e = x.find_first_of("\r\n", k);
        if (e == std::string::npos) {
          out.push_back(Value::string(x.substr(k)));
          break;
        }
        out.push_back(Value::string(x.substr(k, e - k)));
        k = e + ((x[e] == '\r' && e + 1 < x.size() && x[e + 1] == '\n') ? 2 : 1);
      }
      return Value::make_list(std::move(out));
    });
  if (name == "isdigit" || name == "isspace" || name == "isalpha")
    return m([name](const std::string& x, const CallArgs&) {
      if (x.empty()) return Value::boolean(false);
      for (unsigned char c : x) {
        bool ok = name == "isdigit" ? std::isdigit(c) : name == "isspace" ? std::isspace(c) : std::isalpha(c);
        if (c >= 0x80) ok = name == "isalpha";  // non-ASCII letters; digits/spaces are ASCII here
        if (!ok) return Value::boolean(false);
      }
      return Value::boolean(true);
    });
  return Value::undefined(name);
}

Value dict_method(const Value& d, const std::string& name) {
  if (name == "items")
    return Value::function([d](const CallArgs&) {
      ValueList out;
      for (const auto& [k, v] : *d.dict) out.push_back(Value::make_tuple({Value::string(k), v}));
      return Value::make_list(std::move(out));
    });
  if (name == "keys")
    return Value::function([d](const CallArgs&) {
      ValueList out;
      for (const auto& kv : *d.dict) out.push_back(Value::string(kv.first));
      return Value::make_list(std::move(out));
    });
  if (name == "values")
    return Value::function([d](const CallArgs&) {
      ValueList out;
      for (const auto& kv : *d.dict) out.push_back(kv.second);
      return Value::make_list(std::move(out));
    });
  if (name == "get")
    return Value::function([d](const CallArgs& a) {
      const Value* key = a.get(0, "key");
      if (!key) throw TemplateError("get() takes at least 1 argument");
      const Value* found = key->is_string() ? d.find(key->s) : nullptr;
      if (found) return *found;
      const Value* def = a.get(1, "default");
      return def ? *def : Value::none();
    });
  return Value::undefined(name);
}

int64_t norm_index(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

}  // namespace

[[noreturn]] void undefined_error(const Value& v) {
  if (v.s.empty()) throw TemplateError("value is undefined");
  throw TemplateError("'" + v.s + "' is undefined");
}

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind) {
    case Value::Kind::Undefined: undefined_error(obj);
    case Value::Kind::String: return string_method(obj.s, name);
    case Value::Kind::Dict: {
      static const char* methods[] = {"items", "keys", "values", "get"};
      for (const char* m : methods)
        if (name == m) return dict_method(obj, name);
      const Value* v = obj.find(name);
      return v ? *v : Value::undefined(name);
    }
    case Value::Kind::Namespace: {
      const Value* v = obj.find(name);
      return v ? *v : Value::undefined(name);
    }
    default: return Value::undefined(name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind) {
    case Value::Kind::Undefined: undefined_error(obj);
    case Value::Kind::Dict:
    case Value::Kind::Namespace: {
      if (key.is_string()) {
        const Value* v = obj.find(key.s);
        if (v) return *v;
        return obj.kind == Value::Kind::Dict ? get_attr(obj, key.s) : Value::undefined(key.s);
      }
      return Value::undefined(to_str(key));
    }
    case Value::Kind::List: {
      if (key.kind != Value::Kind::Int && key.kind != Value::Kind::Bool)
        return Value::undefined(to_str(key));
      int64_t n = static_cast<int64_t>(obj.list->size());
      int64_t i = norm_index(key.kind == Value::Kind::Bool ? key.b : key.i, n);
      if (i < 0 || i >= n) return Value::undefined(to_str(key));
      return (*obj.list)[static_cast<size_t>(i)];
    }
    case Value::Kind::String: {
      if (key.kind != Value::Kind::Int) return get_attr(obj, to_str(key));
      auto chars = utf8_chars(obj.s);
      int64_t n = static_cast<int64_t>(chars.size());
      int64_t i = norm_index(key.i, n);
      if (i < 0 || i >= n) return Value::undefined(to_str(key));
      return Value::string(chars[static_cast<size_t>(i)]);
    }
    default: return Value::undefined(to_str(key));
  }
}

Value slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  auto opt = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (v.kind != Value::Kind::Int) throw TemplateError(std::string("slice ") + what + " must be an integer");
    return v.i;
  };
  std::optional<int64_t> start = opt(start_v, "start"), stop = opt(stop_v, "stop"), st = opt(step_v, "step");
  int64_t step = st.value_or(1);
  if (step == 0) throw TemplateError("slice step cannot be zero");
  ValueList items;
  bool is_str = obj.is_string();
  if (is_str) {
    for (auto& c : utf8_chars(obj.s)) items.push_back(Value::string(c));
  } else if (obj.is_list()) {
    items = *obj.list;
  } else {
    if (obj.is_undefined()) undefined_error(obj);
    throw TemplateError(std::string("cannot slice a ") + kind_name(obj.kind));
  }
  // Python's slice.indices() clamping rules.
  int64_t n = static_cast<int64_t>(items.size());
  auto clamp = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v < 0 ? *v + n : *v;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  int64_t b = clamp(start, step > 0 ? 0 : n - 1);
  int64_t e = clamp(stop, step > 0 ? n : -1);
  ValueList out;
  for (int64_t k = b; step > 0 ? k < e : k > e; k += step) out.push_back(items[static_cast<size_t>(k)]);
  if (is_str) {
    std::string s;
    for (auto& v : out) s += v.s;
    return Value::string(s);
  }
  return Value::make_list(std::move(out));
}

}  // namespace vkf::tokenizer::jinja
