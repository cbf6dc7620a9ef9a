// Chat templates rendered by vkf::tokenizer against Python's jinja2 configured as transformers
// configures it (tools/oracle/chat_template_oracle.py, run live through popen). Every case is
// compared byte for byte; error cases must fail in both, with raise_exception's message or the
// syntax error's line number carried into the vkf::Error. Without python3 + jinja2 the tests
// fail (they never skip): the oracle is the definition of correct here.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/chat_template.h"
#include "vk/error.h"

namespace vkf::tokenizer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kRepo = fs::path(__FILE__).parent_path().parent_path().parent_path();
const char* kNow = "2024-09-05T14:30:00";  // strftime_now's frozen time in every case

std::tm frozen_now() {
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 8;
  tm.tm_mday = 5;
  tm.tm_hour = 14;
  tm.tm_min = 30;
  tm.tm_wday = 4;
  tm.tm_yday = 248;
  return tm;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot read " << p;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Case {
  std::string name;
  std::string source;
  json context;  // what the template sees
  // For real templates: rendered through apply_chat_template(messages, gen, extra).
  bool use_apply = false;
  json messages;
  bool gen = false;
  json extra;
};

// Runs all cases through jinja2 at once (one python start-up per test).
std::vector<json> run_oracle(const std::vector<Case>& cases) {
  json input = json::array();
  for (const auto& c : cases) input.push_back({{"template", c.source}, {"context", c.context}, {"now", kNow}});
  fs::path in = fs::temp_directory_path() / ("vkf_chat_oracle_" + std::to_string(::getpid()) + ".json");
  std::ofstream(in) << input.dump();
  std::string cmd = "python3 '" + (kRepo / "tools/oracle/chat_template_oracle.py").string() + "' '" +
                    in.string() + "' 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) {
    ADD_FAILURE() << "cannot start python3 for the jinja2 oracle";
    return {};
  }
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  int rc = pclose(pipe);
  fs::remove(in);
  json parsed = json::parse(out, nullptr, false);
  if (rc != 0 || !parsed.is_array() || parsed.size() != cases.size()) {
    ADD_FAILURE() << "the jinja2 oracle (python3 + jinja2 3.x, tools/oracle/chat_template_oracle.py) "
                     "did not run; install python3 and jinja2. Exit status "
                  << rc << ", output:\n"
                  << out;
    return {};
  }
  return parsed.get<std::vector<json>>();
}

// Renders every case in C++ and compares with jinja2; returns the number of mismatches.
int check_cases(const std::vector<Case>& cases) {
  std::vector<json> want = run_oracle(cases);
  if (want.size() != cases.size()) return static_cast<int>(cases.size());
  int mismatches = 0;
  int errors = 0;
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    std::string got;
    std::string error;
    bool threw = false;
    try {
      if (c.use_apply) {
        got = apply_chat_template(c.source, c.messages, c.gen, c.extra, frozen_now());
      } else {
        got = ChatTemplate::parse(c.source).render(c.context, frozen_now());
      }
    } catch (const vkf::Error& e) {
      threw = true;
      error = e.what();
    }
    const json& w = want[k];
    bool ok;
    std::string detail;
    if (w["ok"].get<bool>()) {
      ok = !threw && got == w["text"].get<std::string>();
      detail = threw ? "threw: " + error : "got:\n[" + got + "]\nwant:\n[" + w["text"].get<std::string>() + "]";
    } else {
      ++errors;
      std::string kind = w["kind"].get<std::string>();
      ok = threw;
      if (kind == "TemplateError") ok = ok && error.find(w["error"].get<std::string>()) != std::string::npos;
      if (kind == "TemplateSyntaxError" && w["lineno"].is_number())
        ok = ok && error.find("line " + std::to_string(w["lineno"].get<int>()) + ",") != std::string::npos;
      detail = "jinja2 failed with " + kind + ": " + w["error"].get<std::string>() +
               (threw ? "; we failed with: " + error : "; we rendered:\n[" + got + "]");
    }
    if (!ok) {
      ++mismatches;
      ADD_FAILURE() << "case '" << c.name << "' differs from jinja2\n" << detail;
    }
  }
  std::printf("[chat_template] %zu cases (%d of them expected errors), %d mismatches\n", cases.size(),
              errors, mismatches);
  return mismatches;
}

Case inline_case(std::string name, std::string source, json context = json::object()) {
  Case c;
  c.name = std::move(name);
  c.source = std::move(source);
  c.context = std::move(context);
  return c;
}

Case real_case(const std::string& name, const std::string& file, json messages, bool gen, json extra) {
  Case c;
  c.name = file + ": " + name;
  c.source = read_file(kRepo / "tests/fixtures/chat_templates" / file);
  c.use_apply = true;
  c.messages = messages;
  c.gen = gen;
  c.extra = extra;
  // The variables transformers passes: tools/documents (None when absent), the extra kwargs
  // and special tokens, messages and add_generation_prompt.
  c.context = {{"tools", nullptr}, {"documents", nullptr}};
  for (const auto& [k, v] : extra.items()) c.context[k] = v;
  c.context["messages"] = messages;
  c.context["add_generation_prompt"] = gen;
  return c;
}

// ---- conversations shared by the real-template tests ----

json user_only() { return json::array({{{"role", "user"}, {"content", "Hello, how are you?"}}}); }

json multi_turn() {
  return json::array({{{"role", "system"}, {"content", "You are a terse assistant."}},
                      {{"role", "user"}, {"content", "What is 2+2?"}},
                      {{"role", "assistant"}, {"content", "  4  "}},
                      {{"role", "user"}, {"content", "And 3+3?"}}});
}

json unicode_turns() {
  return json::array({{{"role", "user"}, {"content", "Grüße! 你好 🌍 \"quotes\" and 'apostrophes'\n\ttab"}},
                      {{"role", "assistant"}, {"content", "Привет — ça va? ✓"}},
                      {{"role", "user"}, {"content", "ありがとう"}}});
}

json weather_tool() {
  return json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}])");
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The interpreter on small templates.

TEST(ChatTemplateJinja, ExpressionsMatchJinja2) {
  json ctx = {{"s", "  Hello World  "}, {"n", 7}, {"f", 2.5}, {"l", {3, 1, 2}}, {"d", {{"b", 1}, {"a", "x"}}},
              {"none_v", nullptr}, {"t", true}, {"msgs", {{{"role", "user"}, {"content", "hi"}}}}};
  std::vector<Case> cases = {
      inline_case("literals", "{{ 1 }}|{{ -3 }}|{{ 1.5 }}|{{ 1e3 }}|{{ 'a\\nb\\t\\'q\\'' }}|{{ \"dq\" }}|{{ true }}|{{ False }}|{{ none }}|{{ None }}"),
      inline_case("containers", "{{ [1, 'a', none, true, 2.0] }}|{{ {'k': [1, {'z': none}]} }}|{{ (1, 'b') }}|{{ () }}"),
      inline_case("arithmetic", "{{ 7 + 3 }} {{ 7 - 10 }} {{ 7 * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 10 / 5 }}"),
      inline_case("strings ops", "{{ 'ab' + 'cd' }} {{ 'ab' * 3 }} {{ 'x' ~ 1 ~ none ~ true }} {{ [1] + [2, 3] }}"),
      inline_case("comparisons", "{{ 1 == 1.0 }} {{ 1 != 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1, 2] == [1, 2] }} {{ 'a' in 'cat' }} {{ 2 in l }} {{ 'b' in d }} {{ 5 not in l }} {{ true == 1 }}", ctx),
      inline_case("logic", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ '' and 'b' }} {{ not none_v }} {{ none_v or [] }} {{ n > 5 and n < 10 }}", ctx),
      inline_case("conditional expr", "{{ 'yes' if t else 'no' }} {{ 'yes' if none_v else 'no' }} [{{ 'only' if false }}]", ctx),
      inline_case("subscripts", "{{ l[0] }} {{ l[-1] }} {{ d['a'] }} {{ d.b }} {{ msgs[0].role }} {{ msgs[0]['content'] }} {{ s[2] }} {{ l.1 }}", ctx),
      inline_case("slices", "{{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }} {{ s[2:7] }} {{ s[::-1] }} {{ l[5:] }} {{ 'héllo'[1:3] }}", ctx),
      inline_case("string methods", "[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}][{{ 'xxhixx'.strip('x') }}] {{ s.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a b c'.split(' ', 1) }} {{ s.upper() }} {{ s.lower() }} {{ 'hello wORLD'.title() }} {{ 'hello'.capitalize() }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'abcabc'.find('c') }} {{ 'abcabc'.count('bc') }} {{ '-'.join(['a', 'b']) }}", ctx),
      inline_case("dict methods", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {{ d.keys() | list }} {{ d.values() | list }} {{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 5) }}", ctx),
      inline_case("tests", "{{ n is defined }} {{ zz is defined }} {{ zz is undefined }} {{ none_v is none }} {{ s is string }} {{ d is mapping }} {{ l is iterable }} {{ n is number }} {{ l is sequence }} {{ t is true }} {{ t is false }} {{ n is odd }} {{ n is even }} {{ n is divisibleby(7) }} {{ n is not none }} {{ s is not string }} {{ 'x' is in 'xyz' }} {{ 1 is eq 1 }} {{ msgs[0].tool_calls is defined }} {{ f is float }} {{ n is integer }} {{ n is boolean }}", ctx),
      inline_case("undefined prints empty", "[{{ zz }}][{{ d.missing }}][{{ zz | default('dflt') }}][{{ none_v | default('x') }}][{{ none_v | default('x', true) }}][{{ '' | d('e', true) }}][{{ zz | length }}][{% for x in zz %}no{% endfor %}]", ctx),
      inline_case("filters", "{{ s | trim }}|{{ s | upper }}|{{ s | lower }}|{{ 'hello WORLD' | capitalize }}|{{ 'hello wide-world (x)' | title }}|{{ 'aXbX' | replace('X', '-') }}|{{ l | join(', ') }}|{{ l | first }}|{{ l | last }}|{{ l | length }}|{{ 'héllo' | length }}|{{ d | count }}|{{ 'abc' | list }}|{{ -3 | abs }}|{{ '42' | int }}|{{ 'x' | int }}|{{ 3 | float }}|{{ 2.567 | round(2) }}|{{ 2.5 | round }}|{{ l | sort }}|{{ l | sort(reverse=true) }}|{{ ['b', 'A', 'a'] | unique | list }}|{{ l | string }}|{{ 5 | string }}|{{ l | reverse | list }}|{{ l | sum }}|{{ l | max }}|{{ l | min }}", ctx),
      inline_case("map select", "{{ msgs | map(attribute='role') | list }} {{ msgs | selectattr('role', 'equalto', 'user') | list | length }} {{ msgs | rejectattr('role', 'equalto', 'user') | list }} {{ l | select('odd') | list }} {{ l | reject('odd') | list }} {{ ['a', 'b'] | map('upper') | join }} {{ msgs | selectattr('content') | list | length }} {{ d | items | list }} {{ d | dictsort }}", ctx),
      inline_case("tojson", "{{ d | tojson }}|{{ msgs | tojson(indent=2) }}|{{ 'é\"\\n' | tojson }}|{{ [1.0, 2.5, none, true, {}] | tojson }}|{{ [] | tojson(indent=4) }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}|{{ 1e20 | tojson }}|{{ 0.0001 | tojson }}", ctx),
      inline_case("indent escape", "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(3, blank=true) }}|{{ '<a href=\"x\">&\\'</a>' | e }}|{{ '<b>' | safe }}|{{ '<b>' }}"),
      inline_case("wordcount format", "{{ 'a b  c' | wordcount }}"),
      inline_case("unicode case and whitespace", "{{ 'éCOLE ÑANDÚ straße' | upper }}|{{ 'ÉCOLE Ωμέγα ПРИВЕТ' | lower }}|{{ 'élan vital' | title }}|{{ 'élan vital'.title() }}|{{ 'ýes' | capitalize }}|[{{ '\u00a0\u3000 x \u2003\n' | trim }}]|{{ 'a\u00a0b\u3000c' .split() }}|{{ 'ÀB' is upper }}|{{ '12' is lower }}|{{ 'ŁÓDŹ ąę' | lower }}|{{ 'ǅ' | length }}"),
      inline_case("float repr", "{{ 1/3 }} {{ 1e16 }} {{ 1e15 }} {{ 123456789.125 }} {{ 0.00001 }} {{ -0.5 }} {{ 3.0 }} {{ 2**0.5 }}"),
  };
  EXPECT_EQ(check_cases(cases), 0);
}

TEST(ChatTemplateJinja, StatementsMatchJinja2) {
  json ctx = {{"items", {"a", "b", "c"}}, {"msgs", {{{"role", "system"}, {"content", "S"}}, {{"role", "user"}, {"content", "U"}}}}};
  std::vector<Case> cases = {
      inline_case("if elif else", "{% for i in [1, 2, 3, 4] %}{% if i == 1 %}one{% elif i == 2 %}two{% elif i == 3 %}three{% else %}many{% endif %},{% endfor %}"),
      inline_case("loop vars", "{% for x in items %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('o', 'e') }};{% endfor %}", ctx),
      inline_case("loop filter and else", "{% for x in items if x != 'b' %}{{ loop.index }}{{ x }}{{ loop.length }}{% else %}empty{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}", ctx),
      inline_case("loop unpack", "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}{{ v }}{% endfor %}{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}"),
      inline_case("break continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
      inline_case("range", "{{ range(3) | list }}{{ range(1, 7, 2) | list }}{{ range(5, 0, -2) | list }}"),
      inline_case("set scoping", "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = i * 10 %}{{ x }}{% endfor %}{{ x }}{% if true %}{% set y = 5 %}{% endif %}{{ y }}"),
      inline_case("namespace", "{% set ns = namespace(count=0, found=false) %}{% for m in msgs %}{% if m.role == 'user' %}{% set ns.found = true %}{% endif %}{% set ns.count = ns.count + 1 %}{% endfor %}{{ ns.count }}{{ ns.found }}{% set ns2 = namespace() %}{% set ns2.x = 'v' %}{{ ns2.x }}", ctx),
      inline_case("set block and tuple", "{% set body %}in {{ 1 + 1 }}{% endset %}[{{ body }}]{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, %}{{ t }}"),
      inline_case("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} {{ greet('Al', punct='?') }} {{ greet(name='Z') }}"),
      inline_case("call block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 }}{% endcall %}"),
      inline_case("filter block", "{% filter upper %}hello {{ 'x' }}{% endfilter %}"),
      inline_case("raw", "{% raw %}{{ not rendered }} {% if %}{% endraw %}!"),
      inline_case("comments", "a{# comment #}b{#- trimmed -#}  c\n  {# line comment #}\nd"),
      inline_case("whitespace control", "a  {{- 'b' -}}  c\n  {%- if true -%}  d  {%- endif -%}\n  e {{ 'f' }} \n"),
      inline_case("trim and lstrip blocks", "<ul>\n  {% for x in [1, 2] %}\n    <li>{{ x }}</li>\n  {% endfor %}\n</ul>\n{% if true %}\n  yes\n{% endif %}\n"),
      inline_case("plus disables lstrip", "x\n    {%+ if true %}y{% endif %}\n  {% if true +%}\nz{% endif %}"),
      inline_case("trailing newline dropped", "line\n\n"),
      inline_case("crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n"),
      inline_case("inline statement mid-line", "a {% if true %}b{% endif %} c\n  {{ 'd' }}  {% set q = 1 %}  e\n"),
      inline_case("generation tag", "{% for m in msgs %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}", ctx),
      inline_case("nested loops", "{% for m in msgs %}{% for c in m.content %}{{ loop.index }}{{ c }}{% endfor %}{{ loop.index }}{% endfor %}", ctx),
      inline_case("strftime_now", "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %H:%M') }} {{ strftime_now('%A %B') }}"),
      inline_case("messages slicing idiom", "{% if msgs[0]['role'] == 'system' %}{% set sys = msgs[0]['content'] %}{% set msgs = msgs[1:] %}{% endif %}{{ sys }}:{{ msgs | length }}", ctx),
  };
  EXPECT_EQ(check_cases(cases), 0);
}

TEST(ChatTemplateJinja, EdgeCasesMatchJinja2) {
  json ctx = {{"null_v", nullptr}, {"d", {{"k", "it's"}, {"q", "say \"hi\""}}}, {"msgs", json::array()},
              {"l", {1, 2, 3}}};
  std::vector<Case> cases = {
      inline_case("null is defined", "{{ null_v is defined }} {{ null_v is none }} {{ null_v }} [{{ null_v.attr }}]", ctx),
      inline_case("repr quoting", R"({{ d }} {{ ['it\'s', 'a"b', 'both\'"'] }})", ctx),
      inline_case("unary and pow", "{{ -2 ** 2 }} {{ 2 ** 3 ** 2 }} {{ -l[0] }} {{ not 1 in l }} {{ 1 + 2 * 3 - 4 / 2 }}", ctx),
      inline_case("format", "{{ '%s has %d items (%r)' | format('list', 3, 'x') }} {{ '%s-%s' % ('a', 'b') }} {{ '%d%%' % 50 }} {{ '%.2f' if false else '%f' | format(1.5) }}"),
      inline_case("filters bind tighter", "{{ l | length > 2 }} {{ 'x' ~ l | length }} {{ l | first + 10 }} {{ -l | length if false else 'n' }}", ctx),
      inline_case("empty messages", "{% for m in msgs %}x{% else %}none{% endfor %}{{ msgs | length == 0 }}{% if msgs %}t{% else %}f{% endif %}", ctx),
      inline_case("implicit string concat", R"({{ 'a' 'b' "c" }})"),
      inline_case("sameas", "{{ false is sameas false }} {{ 0 is sameas false }} {{ none is sameas none }}"),
      inline_case("chained filters on strings", "{{ '  Mixed Case  ' | trim | lower | replace(' ', '_') | upper }}"),
      inline_case("nested namespace", "{% set ns = namespace(items=[], last=none) %}{% for x in l %}{% set ns.items = ns.items + [x * 2] %}{% set ns.last = x %}{% endfor %}{{ ns.items }} {{ ns.last }}", ctx),
      inline_case("loop in macro", "{% macro m(xs) %}{% for x in xs %}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}{% endmacro %}[{{ m(l) }}]", ctx),
      inline_case("whitespace around comments with lstrip", "a\n  {#- c -#}\n  b\n    {# c2 #}\n  c"),
      inline_case("block at line start after text", "x\n  {% if true %}\n  y\n  {% endif %}\nz"),
  };
  EXPECT_EQ(check_cases(cases), 0);
}

TEST(ChatTemplateJinja, ErrorsMatchJinja2) {
  std::vector<Case> cases = {
      inline_case("raise_exception", "ok{{ raise_exception('Custom failure: ' ~ 42) }}"),
      inline_case("unclosed if", "line1\n{% if true %}\nbody\n"),
      inline_case("bad expression", "a\nb\n{{ 1 + }}"),
      inline_case("unknown tag", "{% frobnicate %}"),
      inline_case("unterminated string", "x\n{{ 'abc }}"),
      inline_case("unclosed variable", "x {{ a "),
      inline_case("endfor without for", "a\n{% endfor %}"),
      inline_case("attribute of undefined", "{{ missing.attr }}"),
      inline_case("unknown filter", "{{ 1 | nosuchfilter }}"),
      inline_case("add undefined", "{{ missing + 1 }}"),
      inline_case("str plus int", "{{ 'a' + 1 }}"),
      inline_case("call non-callable", "{{ (1)() }}"),
  };
  EXPECT_EQ(check_cases(cases), 0);
  // The error names the template position.
  try {
    ChatTemplate::parse("a\n\n  {% if x %}\n");
    ADD_FAILURE() << "expected a parse error";
  } catch (const vkf::Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 3"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// Real chat templates (tests/fixtures/chat_templates, sources in the README there).

TEST(ChatTemplateReal, ChatML) {
  json extra = json::object();
  std::vector<Case> cases = {
      real_case("single user, prompt", "chatml.jinja", user_only(), true, extra),
      real_case("single user, no prompt", "chatml.jinja", user_only(), false, extra),
      real_case("multi-turn", "chatml.jinja", multi_turn(), true, extra),
      real_case("unicode", "chatml.jinja", unicode_turns(), false, extra),
  };
  EXPECT_EQ(check_cases(cases), 0);
}

TEST(ChatTemplateReal, Llama3) {
  json extra = {{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|end_of_text|>"}};
  std::vector<Case> cases = {
      real_case("single user", "llama3.jinja", user_only(), true, extra),
      real_case("multi-turn, no prompt", "llama3.jinja", multi_turn(), false, extra),
      real_case("unicode", "llama3.jinja", unicode_turns(), true, extra),
  };
  EXPECT_EQ(check_cases(cases), 0);
}

TEST(ChatTemplateReal, Llama3_2ToolsAndDates) {
  json extra = {{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|eot_id|>"}};
  json tools_extra = extra;
  tools_extra["tools"] = weather_tool();
  json tools_sys = tools_extra;
  tools_sys["tools_in_user_message"] = false;
  json dated = extra;
  dated["date_string"] = "01 Jan 2025";
  json tool_conv = json::parse(R"([
    {"role": "system", "content": "You can call tools."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
    {"role": "tool", "content": {"temperature": 21.5, "sky": "clear"}},
    {"role": "tool", "content": "plain text result"},
    {"role": "assistant", "content": "It is 21.5°C and clear."},
    {"role": "user", "content": "Thanks"}])");
  json two_calls = json::parse(R"([{"role": "user", "content": "x"},
    {"role": "assistant", "tool_calls": [{"function": {"name": "a", "arguments": {}}}, {"function": {"name": "b", "arguments": {}}}]}])");
  std::vector<Case> cases = {
      real_case("single user, date from strftime_now", "llama3_2.jinja", user_only(), true, extra),
      real_case("system multi-turn, no prompt", "llama3_2.jinja", multi_turn(), false, extra),
      real_case("date_string given", "llama3_2.jinja", multi_turn(), true, dated),
      real_case("tools in user message", "llama3_2.jinja", tool_conv, true, tools_extra),
      real_case("tools in system message", "llama3_2.jinja", tool_conv, false, tools_sys),
      real_case("unicode", "llama3_2.jinja", unicode_turns(), true, extra),
      real_case("error: two tool calls", "llama3_2.jinja", two_calls, false, extra),
      real_case("error: tools without user message", "llama3_2.jinja", json::array(), true, tools_extra),
  };
  EXPECT_EQ(check_cases(cases), 0);
}

TEST(ChatTemplateReal, Llama3_1BuiltinToolsAndGeneration) {
  // Llama 3.1/3.3 template with {% generation %} blocks (as training stacks use it for masks).
  json extra = {{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|eot_id|>"}};
  json builtin = extra;
  builtin["builtin_tools"] = {"brave_search", "code_interpreter", "wolfram_alpha"};
  json custom = extra;
  custom["custom_tools"] = weather_tool();
  custom["tools_in_user_message"] = false;
  json search_conv = json::parse(R"([
    {"role": "system", "content": "Search when needed."},
    {"role": "user", "content": "Latest news on Mars?"},
    {"role": "assistant", "tool_calls": [{"function": {"name": "brave_search", "arguments": {"query": "Mars news", "count": "3"}}}]},
    {"role": "ipython", "content": [{"title": "Rover finds water", "url": "https://example.org"}]},
    {"role": "assistant", "content": "  A rover found water.  "}])");
  json plain_call = json::parse(R"([
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
    {"role": "tool", "content": "-3 and snowing"}])");
  std::vector<Case> cases = {
      real_case("single user", "llama3_1_generation.jinja", user_only(), true, extra),
      real_case("system multi-turn", "llama3_1_generation.jinja", multi_turn(), false, extra),
      real_case("builtin tools and python_tag call", "llama3_1_generation.jinja", search_conv, true, builtin),
      real_case("custom tools in system message", "llama3_1_generation.jinja", plain_call, true, custom),
      real_case("unicode", "llama3_1_generation.jinja", unicode_turns(), true, extra),
  };
  EXPECT_EQ(check_cases(cases), 0);
}

TEST(ChatTemplateReal, Qwen3ThinkingAndTools) {
  json extra = {{"eos_token", "<|im_end|>"}, {"bos_token", nullptr}};
  json think_off = extra;
  think_off["enable_thinking"] = false;
  json think_on = extra;
  think_on["enable_thinking"] = true;
  json with_tools = extra;
  with_tools["tools"] = weather_tool();
  json reasoning = json::parse(R"([
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "<think>\nSimple sum.\n</think>\n\nIt is 4."},
    {"role": "user", "content": "And 3+3?"},
    {"role": "assistant", "content": "6", "reasoning_content": "Add three twice."},
    {"role": "user", "content": "Thanks"}])");
  json tool_conv = json::parse(R"([
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Weather in Paris and Rome?"},
    {"role": "assistant", "content": "Checking.", "tool_calls": [
      {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
      {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
    {"role": "tool", "content": "{\"temp\": 20}"},
    {"role": "tool", "content": "{\"temp\": 25}"},
    {"role": "assistant", "content": "Paris 20, Rome 25."},
    {"role": "user", "content": "Merci"}])");
  std::vector<Case> cases = {
      real_case("single user", "qwen3.jinja", user_only(), true, extra),
      real_case("single user, no prompt", "qwen3.jinja", user_only(), false, extra),
      real_case("multi-turn with system", "qwen3.jinja", multi_turn(), true, extra),
      real_case("enable_thinking false", "qwen3.jinja", user_only(), true, think_off),
      real_case("enable_thinking true", "qwen3.jinja", user_only(), true, think_on),
      real_case("reasoning history", "qwen3.jinja", reasoning, true, extra),
      real_case("reasoning history, thinking off", "qwen3.jinja", reasoning, true, think_off),
      real_case("tools and tool calls", "qwen3.jinja", tool_conv, true, with_tools),
      real_case("tools, single user", "qwen3.jinja", user_only(), true, with_tools),
      real_case("unicode", "qwen3.jinja", unicode_turns(), true, extra),
  };
  EXPECT_EQ(check_cases(cases), 0);
}

TEST(ChatTemplateReal, Gemma3) {
  json extra = {{"bos_token", "<bos>"}, {"eos_token", "<eos>"}};
  json parts = json::parse(R"([
    {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
    {"role": "user", "content": [{"type": "text", "text": "Part one."}, {"type": "text", "text": " Part two."}]},
    {"role": "assistant", "content": [{"type": "text", "text": "  Done.  "}]},
    {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe it."}]}])");
  json bad_order = json::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])");
  std::vector<Case> cases = {
      real_case("single user", "gemma3.jinja", user_only(), true, extra),
      real_case("system multi-turn", "gemma3.jinja", multi_turn(), true, extra),
      real_case("system multi-turn, no prompt", "gemma3.jinja", multi_turn(), false, extra),
      real_case("content parts", "gemma3.jinja", parts, true, extra),
      real_case("unicode", "gemma3.jinja", unicode_turns(), true, extra),
      real_case("error: roles do not alternate", "gemma3.jinja", bad_order, true, extra),
  };
  EXPECT_EQ(check_cases(cases), 0);
}

TEST(ChatTemplateReal, MistralV3) {
  json extra = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  json with_tools = extra;
  with_tools["tools"] = weather_tool();
  json tool_conv = json::parse(R"([
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "tool_calls": [{"id": "abc123XYZ", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "abc123XYZ", "content": "{\"temp\": 20}"},
    {"role": "assistant", "content": "It is 20 degrees."},
    {"role": "user", "content": "Thanks!"}])");
  json bad_id = tool_conv;
  bad_id[1]["tool_calls"][0]["id"] = "short";
  json bad_order = json::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])");
  json bad_role = json::parse(R"([{"role": "user", "content": "a"}, {"role": "narrator", "content": "b"}])");
  std::vector<Case> cases = {
      real_case("single user", "mistral_v3.jinja", user_only(), true, extra),
      real_case("system multi-turn", "mistral_v3.jinja", multi_turn(), false, extra),
      real_case("tools and tool calls", "mistral_v3.jinja", tool_conv, false, with_tools),
      real_case("unicode", "mistral_v3.jinja", unicode_turns(), true, extra),
      real_case("error: roles do not alternate", "mistral_v3.jinja", bad_order, true, extra),
      real_case("error: bad tool call id", "mistral_v3.jinja", bad_id, false, with_tools),
      real_case("error: unknown role", "mistral_v3.jinja", bad_role, false, extra),
  };
  EXPECT_EQ(check_cases(cases), 0);
}

TEST(ChatTemplateApi, ErrorsAreVkfErrors) {
  // raise_exception's message reaches the caller unchanged inside the vkf::Error.
  json bad_order = json::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])");
  std::string src = read_file(kRepo / "tests/fixtures/chat_templates/mistral_v3.jinja");
  try {
    apply_chat_template(src, bad_order, false, {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
    ADD_FAILURE() << "expected raise_exception to throw";
  } catch (const vkf::Error& e) {
    EXPECT_NE(std::string(e.what()).find("conversation roles must alternate user/assistant/user/assistant/..."),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(apply_chat_template("{{ x }}", json::object(), false), vkf::Error);
  EXPECT_THROW(ChatTemplate::parse("{{ x }}").render(json::array()), vkf::Error);
}

}  // namespace vkf::tokenizer
