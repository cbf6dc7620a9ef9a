// Dataset file selection and resolution (see dataset.h).
#include "data/dataset.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>

#include "data/records.h"
#include "hub/hub.h"
#include "vk/error.h"

namespace vkf::data {
namespace fs = std::filesystem;

namespace {

const std::vector<std::pair<std::string, std::vector<std::string>>>& split_keywords() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> k = {
      {"train", {"train", "training"}},
      {"validation", {"validation", "valid", "val", "dev"}},
      {"test", {"test", "testing", "eval", "evaluation"}},
  };
  return k;
}

bool delimiter(char c) { return c == '-' || c == '.' || c == '_' || c == ' ' || (c >= '0' && c <= '9'); }

// `word` inside `part`, delimited by non-word characters (or the ends).
bool has_keyword(const std::string& part, const std::string& word) {
  for (size_t pos = part.find(word); pos != std::string::npos; pos = part.find(word, pos + 1)) {
    const bool before = pos == 0 || delimiter(part[pos - 1]);
    const size_t after = pos + word.size();
    if (before && (after == part.size() || delimiter(part[after]))) return true;
  }
  return false;
}

bool is_data_file(const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  if (name.empty() || name[0] == '.') return false;
  return is_record_file(path) || fs::path(path).extension() == ".txt";
}

}  // namespace

std::string split_of(const std::string& path) {
  static const std::regex sharded(R"(^([A-Za-z0-9_.]+?)-[0-9]{5}-of-[0-9]{5}(\..*)?$)");
  const std::string name = fs::path(path).filename().string();
  std::smatch m;
  if (std::regex_match(name, m, sharded)) return m[1];
  std::vector<std::string> parts;
  for (const auto& p : fs::path(path)) parts.push_back(p.string());
  if (!parts.empty()) parts.back() = fs::path(parts.back()).stem().string();
  for (const auto& [split, words] : split_keywords())
    for (const auto& part : parts)
      for (const auto& w : words)
        if (has_keyword(part, w)) return split;
  return "";
}

std::vector<std::string> files_for_split(const std::vector<std::string>& files, const std::string& split,
                                         const std::string& what) {
  std::map<std::string, std::vector<std::string>> by_split;
  std::vector<std::string> data;
  for (const auto& f : files) {
    if (!is_data_file(f)) continue;
    data.push_back(f);
    const std::string s = split_of(f);
    if (!s.empty()) by_split[s].push_back(f);
  }
  VKF_REQUIRE(!data.empty(), "{}: no data files (.jsonl, .json, .csv, .tsv, .parquet, .txt)", what);
  if (by_split.empty()) by_split["train"] = data;  // no split names: everything is train
  auto it = by_split.find(split);
  if (it == by_split.end()) {
    std::vector<std::string> names;
    for (const auto& [s, _] : by_split) names.push_back(s);
    fail("{}: no files for the split '{}'; the splits by file name are: {} (choose one with --split)", what, split,
         fmt::join(names, ", "));
  }
  std::sort(it->second.begin(), it->second.end());
  return it->second;
}

std::vector<std::string> resolve_data(const std::string& arg, const std::string& split) {
  std::error_code ec;
  if (fs::is_regular_file(arg, ec)) return {arg};
  if (fs::is_directory(arg, ec)) {
    std::vector<std::string> rel;
    for (auto it = fs::recursive_directory_iterator(arg); it != fs::recursive_directory_iterator(); ++it) {
      const std::string name = it->path().filename().string();
      if (!name.empty() && name[0] == '.') {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file()) rel.push_back(it->path().lexically_relative(arg).generic_string());
    }
    std::vector<std::string> out;
    for (const auto& f : files_for_split(rel, split, arg)) out.push_back((fs::path(arg) / f).string());
    return out;
  }
  VKF_REQUIRE(hub::looks_like_repo(arg), "{}: no such file or folder (nor a Hub dataset org/name)", arg);
  const hub::RepoRef repo = hub::parse_repo(arg, hub::RepoType::Dataset);
  hub::Snapshot snap;
  try {
    snap = hub::Hub().snapshot(repo, [&](const std::vector<std::string>& all) {
      return files_for_split(all, split, repo.display());
    });
  } catch (const Error& e) {
    fail("{} is not a local path, and as a Hub dataset: {}", arg, e.what());
  }
  std::vector<std::string> out;
  for (const auto& f : snap.files) out.push_back((snap.dir / f).string());
  return out;
}

}  // namespace vkf::data
