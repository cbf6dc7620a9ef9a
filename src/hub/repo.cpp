// Hub names and their validation (see repo.h). The id rules follow the Hub's: one or two parts of
// letters, digits, '-', '_', '.', at most 96 characters each, not starting or ending with '-' or
// '.', without "--" or "..".
#include "hub/repo.h"

#include <fmt/format.h>

#include <cctype>

#include "vk/error.h"

namespace vkf::hub {
namespace {

bool id_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'; }

std::string id_part_problem(const std::string& p) {
  if (p.empty()) return "an empty part";
  if (p.size() > 96) return "a part longer than 96 characters";
  for (char c : p)
    if (!id_char(c)) return fmt::format("the character '{}' (only letters, digits, '-', '_' and '.')", c);
  if (p.front() == '-' || p.front() == '.' || p.back() == '-' || p.back() == '.')
    return "a part that starts or ends with '-' or '.'";
  if (p.find("--") != std::string::npos || p.find("..") != std::string::npos) return "\"--\" or \"..\"";
  return "";
}

}  // namespace

const char* RepoRef::type_plural() const {
  return type == RepoType::Dataset ? "datasets" : type == RepoType::Space ? "spaces" : "models";
}

std::string RepoRef::folder_name() const {
  std::string id_part = id;
  size_t pos = 0;
  while ((pos = id_part.find('/', pos)) != std::string::npos) {
    id_part.replace(pos, 1, "--");
    pos += 2;
  }
  return std::string(type_plural()) + "--" + id_part;
}

std::string RepoRef::url_prefix() const {
  return type == RepoType::Dataset ? "datasets/" : type == RepoType::Space ? "spaces/" : "";
}

std::string RepoRef::display() const {
  return url_prefix() + id + (revision == "main" ? "" : "@" + revision);
}

void check_repo_id(const std::string& id) {
  const size_t slash = id.find('/');
  const std::string problem =
      slash == std::string::npos
          ? id_part_problem(id)
          : (id.find('/', slash + 1) != std::string::npos ? "more than one '/'"
                                                          : id_part_problem(id.substr(0, slash)).empty()
                                                                ? id_part_problem(id.substr(slash + 1))
                                                                : id_part_problem(id.substr(0, slash)));
  VKF_REQUIRE(problem.empty(), "'{}' is not a valid Hub repository id ({}); expected org/name", id, problem);
}

void check_revision(const std::string& rev) {
  VKF_REQUIRE(!rev.empty() && rev.size() <= 256, "revision '{}': must be 1 to 256 characters", rev);
  for (char c : rev)
    VKF_REQUIRE(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '/',
                "revision '{}': the character '{}' is not allowed (letters, digits, '-', '_', '.', '/')", rev, c);
  VKF_REQUIRE(rev.front() != '/' && rev.back() != '/' && rev.find("//") == std::string::npos &&
                  rev.find("..") == std::string::npos && rev.front() != '.',
              "revision '{}': refused (it would not stay inside the cache's refs folder)", rev);
}

void check_repo_filename(const std::string& name) {
  auto refuse = [&](const char* why) {
    fail("refusing the repository file name '{}': {}; it could write outside the cache", name, why);
  };
  if (name.empty() || name.size() > 4096) refuse("empty or too long");
  if (name.front() == '/') refuse("an absolute path");
  if (name.find('\\') != std::string::npos) refuse("a backslash");
  for (unsigned char c : name)
    if (c < 0x20 || c == 0x7f) refuse("a control character");
  size_t start = 0;
  while (start <= name.size()) {
    const size_t end = std::min(name.find('/', start), name.size());
    const std::string part = name.substr(start, end - start);
    if (part.empty()) refuse("an empty path component");
    if (part == "." || part == "..") refuse("a '.' or '..' component");
    start = end + 1;
  }
}

bool is_commit_hash(const std::string& s) {
  if (s.size() != 40) return false;
  for (char c : s)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

RepoRef parse_repo(const std::string& spec, RepoType default_type) {
  RepoRef r;
  r.type = default_type;
  std::string s = spec;
  for (const auto& [prefix, type] : {std::pair<const char*, RepoType>{"datasets/", RepoType::Dataset},
                                     {"models/", RepoType::Model}, {"spaces/", RepoType::Space}}) {
    const std::string p = prefix;
    // "datasets/org/name": the prefix only counts when an id follows it with its own '/'.
    if (s.rfind(p, 0) == 0 && s.find('/', p.size()) != std::string::npos) {
      r.type = type;
      s = s.substr(p.size());
      break;
    }
  }
  const size_t at = s.find('@');
  if (at != std::string::npos) {
    r.revision = s.substr(at + 1);
    s = s.substr(0, at);
  }
  r.id = s;
  check_repo_id(r.id);
  check_revision(r.revision);
  return r;
}

bool looks_like_repo(const std::string& s) {
  try {
    parse_repo(s);
    return s.find('/') != std::string::npos;
  } catch (const Error&) {
    return false;
  }
}

std::string url_quote(const std::string& s, bool keep_slash) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

}  // namespace vkf::hub
