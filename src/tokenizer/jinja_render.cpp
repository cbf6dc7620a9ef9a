// Tree-walking interpreter for the chat-template subset of Jinja. Python semantics matter for the
// rendered bytes, so arithmetic, truth, "and"/"or" returning an operand, and Undefined follow
// jinja2 3.1 and Python 3 rules.
#include "tokenizer/jinja_render.h"

#include <cmath>
#include <map>

#include "tokenizer/jinja_builtins.h"
#include "vk/error.h"

namespace vkf::tokenizer::jinja {
namespace {

using Frame = std::map<std::string, Value>;
enum class Flow { Normal, Break, Continue };

class Renderer {
 public:
  Renderer(const Value& vars, const RenderOptions& options) : options_(options) {
    auto globals = std::make_shared<Frame>();
    install_globals(*globals);
    for (const auto& [k, v] : *vars.dict) (*globals)[k] = v;
    frames_.push_back(globals);
    frames_.push_back(std::make_shared<Frame>());  // the template's own top-level scope
  }

  std::string run(const Body& body) {
    std::string out;
    render_body(body, out);
    return out;
  }

 private:
  void install_globals(Frame& g) {
    g["range"] = Value::function([](const CallArgs& a) {
      int64_t start = 0, stop = 0, step = 1;
      auto num = [](const Value& v) {
        if (v.kind != Value::Kind::Int) throw TemplateError("range() expects integers");
        return v.i;
      };
      if (a.pos.size() == 1) {
        stop = num(a.pos[0]);
      } else if (a.pos.size() >= 2) {
        start = num(a.pos[0]);
        stop = num(a.pos[1]);
        if (a.pos.size() > 2) step = num(a.pos[2]);
      } else {
        throw TemplateError("range() expects 1 to 3 arguments");
      }
      if (step == 0) throw TemplateError("range() step must not be zero");
      ValueList out;
      for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) out.push_back(Value::integer(k));
      return Value::make_list(std::move(out));
    });
    auto make_mapping = [](const CallArgs& a, bool ns) {
      ValueDict d;
      if (!a.pos.empty() && a.pos[0].is_mapping()) d = *a.pos[0].dict;
      Value v = ns ? Value::make_namespace(std::move(d)) : Value::make_dict(std::move(d));
      for (const auto& [k, x] : a.kw) v.set(k, x);
      return v;
    };
    g["namespace"] = Value::function([make_mapping](const CallArgs& a) { return make_mapping(a, true); });
    g["dict"] = Value::function([make_mapping](const CallArgs& a) { return make_mapping(a, false); });
    g["raise_exception"] = Value::function([](const CallArgs& a) -> Value {
      throw TemplateError("raise_exception: " + (a.pos.empty() ? std::string() : to_str(a.pos[0])));
    });
    g["strftime_now"] = Value::function([this](const CallArgs& a) {
      std::tm tm{};
      if (options_.now) {
        tm = *options_.now;
      } else {
        std::time_t t = std::time(nullptr);
        localtime_r(&t, &tm);
      }
      std::string fmt = a.pos.empty() ? std::string() : to_str(a.pos[0]);
      char buf[512];
      // The format comes from the template by design, as in Python's datetime.strftime.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
      size_t n = std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
#pragma GCC diagnostic pop
      return Value::string(std::string(buf, n));
    });
  }

  Value lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      auto f = (*it)->find(name);
      if (f != (*it)->end()) return f->second;
    }
    return Value::undefined(name);
  }

  // ---- statements ----

  Flow render_body(const Body& body, std::string& out) {
    for (const auto& s : body) {
      Flow f = render_stmt(*s, out);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow render_stmt(const Stmt& s, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::Text: out += s.text; return Flow::Normal;
      case Stmt::Kind::Output: out += to_str(eval(*s.expr)); return Flow::Normal;
      case Stmt::Kind::If:
        for (size_t k = 0; k < s.conds.size(); ++k)
          if (truthy(eval(*s.conds[k]))) return render_body(s.bodies[k], out);
        if (s.bodies.size() > s.conds.size()) return render_body(s.bodies.back(), out);
        return Flow::Normal;
      case Stmt::Kind::For: render_for(s, out); return Flow::Normal;
      case Stmt::Kind::Set: {
        Value v;
        if (s.expr) {
          v = eval(*s.expr);
        } else {
          std::string captured;
          render_body(s.bodies[0], captured);
          v = Value::string(captured);
        }
        assign(s, v);
        return Flow::Normal;
      }
      case Stmt::Kind::Macro: {
        const Stmt* macro = &s;
        frames_.back()->operator[](s.text) =
            Value::function([this, macro](const CallArgs& a) { return call_macro(*macro, a); });
        return Flow::Normal;
      }
      case Stmt::Kind::CallBlock: {
        const Expr& call = *s.expr;
        Value callee = eval(*call.a[0]);
        CallArgs args = eval_args(call);
        const Body* body = &s.bodies[0];
        args.kw.emplace_back("caller", Value::function([this, body](const CallArgs&) {
                               std::string text;
                               frames_.push_back(std::make_shared<Frame>());
                               render_body(*body, text);
                               frames_.pop_back();
                               return Value::string(text);
                             }));
        out += to_str(call_value(callee, args, call));
        return Flow::Normal;
      }
      case Stmt::Kind::FilterBlock: {
        std::string text;
        render_body(s.bodies[0], text);
        std::string saved = block_text_;
        block_text_ = text;
        out += to_str(eval(*s.expr));
        block_text_ = saved;
        return Flow::Normal;
      }
      case Stmt::Kind::Break: return check_loop(s, Flow::Break);
      case Stmt::Kind::Continue: return check_loop(s, Flow::Continue);
      case Stmt::Kind::Scope: return render_body(s.bodies[0], out);
    }
    return Flow::Normal;
  }

  Flow check_loop(const Stmt& s, Flow f) {
    if (loop_depth_ == 0)
      fail("chat template line {}, column {}: '{}' outside of a for loop", s.line, s.col,
           f == Flow::Break ? "break" : "continue");
    return f;
  }

  [[noreturn]] void error_at(int line, int col, const std::string& what) const {
    fail("chat template line {}, column {}: {}", line, col, what);
  }

  void assign(const Stmt& s, const Value& v) {
    if (!s.attr.empty()) {
      Value ns = lookup(s.targets[0]);
      if (ns.kind != Value::Kind::Namespace)
        error_at(s.line, s.col, "cannot assign attribute '" + s.attr + "' on '" + s.targets[0] +
                                    "', which is not a namespace()");
      ns.set(s.attr, v);
      return;
    }
    if (s.targets.size() == 1) {
      (*frames_.back())[s.targets[0]] = v;
      return;
    }
    ValueList items;
    if (!iterate(v, &items) || items.size() != s.targets.size())
      error_at(s.line, s.col, "cannot unpack into " + std::to_string(s.targets.size()) + " names");
    for (size_t k = 0; k < items.size(); ++k) (*frames_.back())[s.targets[k]] = items[k];
  }

  void bind_targets(const Stmt& s, Frame& frame, const Value& item) {
    if (s.targets.size() == 1) {
      frame[s.targets[0]] = item;
      return;
    }
    ValueList parts;
    if (!iterate(item, &parts) || parts.size() != s.targets.size())
      error_at(s.line, s.col, "cannot unpack loop item into " + std::to_string(s.targets.size()) + " names");
    for (size_t k = 0; k < parts.size(); ++k) frame[s.targets[k]] = parts[k];
  }

  void render_for(const Stmt& s, std::string& out) {
    Value seq = eval(*s.expr);
    ValueList all;
    if (!iterate(seq, &all))
      error_at(s.expr->line, s.expr->col, std::string("'") + kind_name(seq.kind) + "' object is not iterable");
    ValueList items;
    if (s.cond) {  // "for x in xs if cond": filtered before loop.index/length are counted
      for (const auto& it : all) {
        auto frame = std::make_shared<Frame>();
        bind_targets(s, *frame, it);
        frames_.push_back(frame);
        bool keep = truthy(eval(*s.cond));
        frames_.pop_back();
        if (keep) items.push_back(it);
      }
    } else {
      items = std::move(all);
    }
    if (items.empty()) {
      render_body(s.bodies[1], out);
      return;
    }
    int64_t n = static_cast<int64_t>(items.size());
    ++loop_depth_;
    for (int64_t k = 0; k < n; ++k) {
      auto frame = std::make_shared<Frame>();  // a fresh scope per iteration, as in jinja2
      bind_targets(s, *frame, items[static_cast<size_t>(k)]);
      ValueDict loop = {
          {"index", Value::integer(k + 1)},
          {"index0", Value::integer(k)},
          {"revindex", Value::integer(n - k)},
          {"revindex0", Value::integer(n - k - 1)},
          {"first", Value::boolean(k == 0)},
          {"last", Value::boolean(k == n - 1)},
          {"length", Value::integer(n)},
          {"depth", Value::integer(1)},
          {"depth0", Value::integer(0)},
          {"previtem", k > 0 ? items[static_cast<size_t>(k - 1)] : Value::undefined("previtem")},
          {"nextitem", k + 1 < n ? items[static_cast<size_t>(k + 1)] : Value::undefined("nextitem")},
      };
      Value loop_v = Value::make_namespace(std::move(loop));
      loop_v.set("cycle", Value::function([k](const CallArgs& a) {
                   if (a.pos.empty()) throw TemplateError("loop.cycle() needs at least one argument");
                   return a.pos[static_cast<size_t>(k) % a.pos.size()];
                 }));
      (*frame)["loop"] = loop_v;
      frames_.push_back(frame);
      Flow f = render_body(s.bodies[0], out);
      frames_.pop_back();
      if (f == Flow::Break) break;
    }
    --loop_depth_;
  }

  Value call_macro(const Stmt& m, const CallArgs& a) {
    auto frame = std::make_shared<Frame>();
    if (a.pos.size() > m.params.size())
      error_at(m.line, m.col, "macro '" + m.text + "' takes " + std::to_string(m.params.size()) +
                                  " arguments, got " + std::to_string(a.pos.size()));
    for (size_t k = 0; k < m.params.size(); ++k) {
      if (k < a.pos.size()) (*frame)[m.params[k]] = a.pos[k];
    }
    for (const auto& [k, v] : a.kw) (*frame)[k] = v;
    // Macros see the globals and the template's top level, not the caller's loop variables.
    std::vector<std::shared_ptr<Frame>> saved = frames_;
    frames_ = {saved[0], saved[1], frame};
    for (size_t k = 0; k < m.params.size(); ++k)
      if (!frame->count(m.params[k]))
        (*frame)[m.params[k]] = m.defaults[k] ? eval(*m.defaults[k]) : Value::undefined(m.params[k]);
    int depth = loop_depth_;
    loop_depth_ = 0;
    std::string out;
    try {
      render_body(m.bodies[0], out);
    } catch (...) {
      frames_ = saved;
      loop_depth_ = depth;
      throw;
    }
    frames_ = saved;
    loop_depth_ = depth;
    return Value::string(out);
  }

  // ---- expressions ----

  CallArgs eval_args(const Expr& e, size_t first = 1) {
    CallArgs args;
    size_t n_kw = e.kwnames.size();
    size_t n_pos = e.a.size() - first - n_kw;
    for (size_t k = 0; k < n_pos; ++k) args.pos.push_back(eval(*e.a[first + k]));
    for (size_t k = 0; k < n_kw; ++k) args.kw.emplace_back(e.kwnames[k], eval(*e.a[first + n_pos + k]));
    return args;
  }

  Value call_value(const Value& callee, const CallArgs& args, const Expr& e) {
    if (callee.kind != Value::Kind::Function) {
      if (callee.is_undefined()) undefined_error(callee);
      error_at(e.line, e.col, std::string("'") + kind_name(callee.kind) + "' object is not callable");
    }
    return (*callee.fn)(args);
  }

  Value eval(const Expr& e) {
    try {
      return eval_inner(e);
    } catch (const TemplateError& err) {
      error_at(e.line, e.col, err.what());
    }
  }

  Value eval_inner(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::Literal:
        return e.name == "__filter_block__" ? Value::string(block_text_) : e.value;
      case Expr::Kind::Name: return lookup(e.name);
      case Expr::Kind::Attr: return get_attr(eval(*e.a[0]), e.name);
      case Expr::Kind::Item: return get_item(eval(*e.a[0]), eval(*e.a[1]));
      case Expr::Kind::Slice: {
        Value obj = eval(*e.a[0]);
        auto part = [&](size_t k) { return e.a[k] ? eval(*e.a[k]) : Value::none(); };
        return slice(obj, part(1), part(2), part(3));
      }
      case Expr::Kind::Call: {
        Value callee = eval(*e.a[0]);
        return call_value(callee, eval_args(e), e);
      }
      case Expr::Kind::Filter: return apply_filter(e.name, eval(*e.a[0]), eval_args(e));
      case Expr::Kind::Test: return Value::boolean(apply_test(e.name, eval(*e.a[0]), eval_args(e)) != e.negated);
      case Expr::Kind::Unary: {
        Value v = eval(*e.a[0]);
        if (e.name == "not") return Value::boolean(!truthy(v));
        if (v.kind == Value::Kind::Int) return Value::integer(e.name == "-" ? -v.i : v.i);
        if (v.kind == Value::Kind::Bool) return Value::integer(e.name == "-" ? -int64_t{v.b} : v.b);
        if (v.kind == Value::Kind::Float) return Value::number(e.name == "-" ? -v.f : v.f);
        if (v.is_undefined()) undefined_error(v);
        throw TemplateError(std::string("bad operand type for unary ") + e.name + ": '" + kind_name(v.kind) + "'");
      }
      case Expr::Kind::Binary: return eval_binary(e);
      case Expr::Kind::Compare: {
        Value left = eval(*e.a[0]);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          Value right = eval(*e.a[k + 1]);
          if (!compare(e.ops[k], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case Expr::Kind::Cond:
        if (truthy(eval(*e.a[0]))) return eval(*e.a[1]);
        return e.a[2] ? eval(*e.a[2]) : Value::undefined();
      case Expr::Kind::List:
      case Expr::Kind::Tuple: {
        ValueList items;
        for (const auto& x : e.a) items.push_back(eval(*x));
        return e.kind == Expr::Kind::List ? Value::make_list(std::move(items)) : Value::make_tuple(std::move(items));
      }
      case Expr::Kind::Dict: {
        Value d = Value::make_dict();
        for (size_t k = 0; k + 1 < e.a.size(); k += 2) {
          Value key = eval(*e.a[k]);
          if (!key.is_string()) throw TemplateError("only string keys are supported in dict literals");
          d.set(key.s, eval(*e.a[k + 1]));
        }
        return d;
      }
    }
    return Value::undefined();
  }

  static bool contains(const Value& container, const Value& item) {
    if (container.is_string()) {
      if (!item.is_string())
        throw TemplateError(std::string("'in <string>' requires string as left operand, not ") + kind_name(item.kind));
      return container.s.find(item.s) != std::string::npos;
    }
    if (container.is_mapping()) return item.is_string() && container.find(item.s) != nullptr;
    ValueList items;
    if (!iterate(container, &items))
      throw TemplateError(std::string("argument of type '") + kind_name(container.kind) + "' is not iterable");
    for (const auto& x : items)
      if (equals(x, item)) return true;
    return false;
  }

  static bool compare(const std::string& op, const Value& l, const Value& r) {
    if (op == "==") return equals(l, r);
    if (op == "!=") return !equals(l, r);
    if (op == "in") return contains(r, l);
    if (op == "not in") return !contains(r, l);
    if (l.is_undefined()) undefined_error(l);
    if (r.is_undefined()) undefined_error(r);
    std::string err;
    bool res = op == "<" ? less_than(l, r, &err) : op == ">" ? less_than(r, l, &err)
             : op == "<=" ? !less_than(r, l, &err) : !less_than(l, r, &err);
    if (!err.empty()) throw TemplateError(err);
    return res;
  }

  Value eval_binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value l = eval(*e.a[0]);
      return truthy(l) ? eval(*e.a[1]) : l;
    }
    if (op == "or") {
      Value l = eval(*e.a[0]);
      return truthy(l) ? l : eval(*e.a[1]);
    }
    Value l = eval(*e.a[0]);
    Value r = eval(*e.a[1]);
    if (op == "~") return Value::string(to_str(l) + to_str(r));
    if (l.is_undefined()) undefined_error(l);
    if (r.is_undefined()) undefined_error(r);
    return arith(op, l, r);
  }

  static Value arith(const std::string& op, const Value& l, const Value& r) {
    using K = Value::Kind;
    auto type_error = [&]() -> Value {
      throw TemplateError("unsupported operand type(s) for " + op + ": '" + kind_name(l.kind) + "' and '" +
                          kind_name(r.kind) + "'");
    };
    if (op == "+") {
      if (l.is_string() && r.is_string()) return Value::string(l.s + r.s);
      if (l.is_list() && r.is_list()) {
        ValueList out = *l.list;
        out.insert(out.end(), r.list->begin(), r.list->end());
        return Value::make_list(std::move(out));
      }
    }
    if (op == "%" && l.is_string()) {
      ValueList args = r.is_list() && r.is_tuple ? *r.list : ValueList{r};
      return Value::string(percent_format(l.s, args));
    }
    if (op == "*" && ((l.is_string() || l.is_list()) && r.kind == K::Int)) {
      if (l.is_string()) {
        std::string out;
        for (int64_t k = 0; k < r.i; ++k) out += l.s;
        return Value::string(out);
      }
      ValueList out;
      for (int64_t k = 0; k < r.i; ++k) out.insert(out.end(), l.list->begin(), l.list->end());
      return Value::make_list(std::move(out));
    }
    if (!l.is_number() || !r.is_number()) return type_error();
    bool ints = l.kind != K::Float && r.kind != K::Float;
    int64_t a = l.kind == K::Bool ? l.b : l.i, b = r.kind == K::Bool ? r.b : r.i;
    double x = l.as_double(), y = r.as_double();
    if (op == "+") return ints ? Value::integer(a + b) : Value::number(x + y);
    if (op == "-") return ints ? Value::integer(a - b) : Value::number(x - y);
    if (op == "*") return ints ? Value::integer(a * b) : Value::number(x * y);
    if (op == "/") {
      if (y == 0) throw TemplateError("division by zero");
      return Value::number(x / y);
    }
    if (op == "//" || op == "%") {
      if (y == 0) throw TemplateError("integer division or modulo by zero");
      if (ints) {  // Python floors toward negative infinity
        int64_t q = a / b;
        if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
        return op == "//" ? Value::integer(q) : Value::integer(a - q * b);
      }
      double q = std::floor(x / y);
      return op == "//" ? Value::number(q) : Value::number(x - q * y);
    }
    if (op == "**") {
      if (ints && b >= 0) {
        int64_t res = 1;
        for (int64_t k = 0; k < b; ++k) res *= a;
        return Value::integer(res);
      }
      return Value::number(std::pow(x, y));
    }
    return type_error();
  }

  RenderOptions options_;
  std::vector<std::shared_ptr<Frame>> frames_;
  int loop_depth_ = 0;
  std::string block_text_;
};

}  // namespace

std::string render(const Body& body, const Value& variables, const RenderOptions& options) {
  return Renderer(variables, options).run(body);
}

}  // namespace vkf::tokenizer::jinja
