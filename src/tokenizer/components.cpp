// Shared helpers for the pipeline stages: JSON field access with clear errors, Split behaviours
// and String/Regex patterns.
#include "tokenizer/components.h"

#include "tokenizer/regex.h"
#include "vk/error.h"

namespace vkf::tok {

const json& field(const json& obj, const std::string& where, const char* name) {
  VKF_REQUIRE(obj.is_object(), "{}: expected a JSON object, got {}", where, obj.type_name());
  auto it = obj.find(name);
  VKF_REQUIRE(it != obj.end(), "{}: missing field \"{}\"; add it to tokenizer.json", where, name);
  return *it;
}

std::string str_field(const json& obj, const std::string& where, const char* name,
                      std::optional<std::string> fallback) {
  auto it = obj.find(name);
  if ((it == obj.end() || it->is_null()) && fallback) return *fallback;
  const json& v = field(obj, where, name);
  VKF_REQUIRE(v.is_string(), "{}.{}: expected a string, got {}", where, name, v.type_name());
  return v.get<std::string>();
}

bool bool_field(const json& obj, const std::string& where, const char* name, bool fallback) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return fallback;
  VKF_REQUIRE(it->is_boolean(), "{}.{}: expected true or false, got {}", where, name,
              it->type_name());
  return it->get<bool>();
}

std::string type_of(const json& obj, const std::string& where) {
  return str_field(obj, where, "type");
}

SplitBehavior parse_behavior(const std::string& name, const std::string& where) {
  if (name == "Removed") return SplitBehavior::Removed;
  if (name == "Isolated") return SplitBehavior::Isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (name == "Contiguous") return SplitBehavior::Contiguous;
  fail(
      "{}.behavior: unknown value \"{}\"; use Removed, Isolated, MergedWithPrevious, "
      "MergedWithNext or Contiguous",
      where, name);
}

std::vector<std::string> split_by(std::string_view text,
                                  const std::vector<std::pair<size_t, size_t>>& matches,
                                  SplitBehavior behavior, bool invert) {
  // Segments covering the whole text, each flagged as a match or a gap.
  struct Seg {
    size_t s, e;
    bool m;
  };
  std::vector<Seg> segs;
  size_t prev = 0;
  for (auto [s, e] : matches) {
    if (s > prev) segs.push_back({prev, s, false});
    segs.push_back({s, e, true});
    prev = e;
  }
  if (prev < text.size() || segs.empty()) segs.push_back({prev, text.size(), false});
  if (invert)
    for (auto& g : segs) g.m = !g.m;
  std::vector<Seg> out;
  bool prev_match = false;
  switch (behavior) {
    case SplitBehavior::Removed:
      for (auto& g : segs)
        if (!g.m) out.push_back(g);
      break;
    case SplitBehavior::Isolated:
      out = segs;
      break;
    case SplitBehavior::MergedWithPrevious:
      for (auto& g : segs) {
        if (g.m && !prev_match && !out.empty())
          out.back().e = g.e;
        else
          out.push_back(g);
        prev_match = g.m;
      }
      break;
    case SplitBehavior::MergedWithNext:
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->m && !prev_match && !out.empty())
          out.back().s = it->s;
        else
          out.push_back(*it);
        prev_match = it->m;
      }
      std::reverse(out.begin(), out.end());
      break;
    case SplitBehavior::Contiguous:
      for (auto& g : segs) {
        if (g.m == prev_match && !out.empty())
          out.back().e = g.e;
        else
          out.push_back(g);
        prev_match = g.m;
      }
      break;
  }
  std::vector<std::string> pieces;
  for (auto& g : out)
    if (g.e > g.s) pieces.emplace_back(text.substr(g.s, g.e - g.s));
  return pieces;
}

Pattern Pattern::parse(const json& j, const std::string& where) {
  VKF_REQUIRE(j.is_object() && (j.contains("String") || j.contains("Regex")),
              "{}: expected {{\"String\": ...}} or {{\"Regex\": ...}}", where);
  Pattern p;
  if (j.contains("String")) {
    p.literal = str_field(j, where, "String");
  } else {
    p.regex = Regex::get(str_field(j, where, "Regex"), where + ".Regex");
  }
  return p;
}

std::vector<std::pair<size_t, size_t>> Pattern::find_all(std::string_view text) const {
  if (regex) return regex->find_all(text);
  std::vector<std::pair<size_t, size_t>> out;
  if (literal.empty()) return out;
  for (size_t pos = text.find(literal); pos != std::string_view::npos;
       pos = text.find(literal, pos + literal.size()))
    out.emplace_back(pos, pos + literal.size());
  return out;
}

}  // namespace vkf::tok
