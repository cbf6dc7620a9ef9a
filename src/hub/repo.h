// Naming things on the Hugging Face Hub: repository references `org/name[@revision]` (datasets as
// `datasets/org/name` or with RepoType::Dataset), their cache folder names (`models--org--name`),
// URL quoting, and the checks that keep names read from a server or a command line from escaping
// the cache: repository ids, revisions and repository file names are validated before any of them
// becomes part of a path (no absolute paths, no `..`, no backslashes or control characters).
#pragma once

#include <string>

namespace vkf::hub {

enum class RepoType { Model, Dataset, Space };

struct RepoRef {
  RepoType type = RepoType::Model;
  std::string id;                 // "org/name" (or a legacy "name")
  std::string revision = "main";  // branch, tag or 40-hex commit

  const char* type_plural() const;  // "models", "datasets", "spaces" (cache folders, API paths)
  std::string folder_name() const;  // "models--org--name", as huggingface_hub names it
  std::string url_prefix() const;   // "" for models, "datasets/", "spaces/"
  std::string display() const;      // "org/name@rev", with "datasets/" for datasets
};

// Parses "org/name", "org/name@rev", "datasets/org/name[@rev]". Throws vkf::Error for a malformed
// id or revision, naming `spec` and the rule broken.
RepoRef parse_repo(const std::string& spec, RepoType default_type = RepoType::Model);

// True when `s` has the shape of a Hub reference (used only after checking it is no local path).
bool looks_like_repo(const std::string& s);

// Validation; each throws a vkf::Error naming the value and why it is refused.
void check_repo_id(const std::string& id);
void check_revision(const std::string& revision);
void check_repo_filename(const std::string& name);  // a file path inside a repository

bool is_commit_hash(const std::string& s);  // 40 lowercase hex digits

// Percent-encodes `s` for a URL; '/' is kept when `keep_slash` (file paths), encoded otherwise
// (revisions such as "refs/pr/1", as huggingface_hub quotes them).
std::string url_quote(const std::string& s, bool keep_slash);

}  // namespace vkf::hub
