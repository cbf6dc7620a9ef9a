// Local-path-or-Hub-reference resolution for the CLI (see resolve.h).
#include "hub/resolve.h"

#include <algorithm>
#include <filesystem>

#include "hub/hub.h"
#include "vk/error.h"

namespace vkf::hub {
namespace fs = std::filesystem;

namespace {

bool has_suffix(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

FileSelector selector(Need need) {
  return [need](const std::vector<std::string>& all) {
    std::vector<std::string> out;
    for (const auto& f : all) {
      if (f.find('/') != std::string::npos) continue;  // subfolders hold other formats (onnx/, original/)
      bool keep = false;
      if (need == Need::Tokenizer) {
        keep = f == "tokenizer.json" || f == "tokenizer_config.json" || f == "special_tokens_map.json" ||
               f == "added_tokens.json" || f == "chat_template.jinja" || f == "chat_template.json" || f == "config.json";
      } else {
        keep = has_suffix(f, ".json") || has_suffix(f, ".safetensors") || has_suffix(f, ".jinja");
      }
      if (keep) out.push_back(f);
    }
    return out;
  };
}

}  // namespace

std::string resolve_path(const std::string& arg, Need need) {
  std::error_code ec;
  if (arg.empty() || fs::exists(arg, ec) || !looks_like_repo(arg)) return arg;
  const RepoRef repo = parse_repo(arg);
  Snapshot snap;
  try {
    snap = Hub().snapshot(repo, selector(need));
  } catch (const Error& e) {
    fail("{} is not a local path, and as a Hub repository: {}", arg, e.what());
  }
  const auto has = [&](const char* f) { return std::find(snap.files.begin(), snap.files.end(), f) != snap.files.end(); };
  const std::string where = snap.from_cache ? "the cached snapshot " + snap.dir.string() : "the repository";
  if (need == Need::Model) {
    VKF_REQUIRE(has("config.json"), "{}: {} has no config.json (files: {}); not a transformers model, or not fetched",
                repo.display(), where, fmt::join(snap.files, ", "));
    VKF_REQUIRE(has("model.safetensors") || has("model.safetensors.index.json"),
                "{}: {} has no model.safetensors or model.safetensors.index.json; vkformer reads "
                "safetensors weights only", repo.display(), where);
  } else if (need == Need::Adapter) {
    VKF_REQUIRE(has("adapter_config.json") || has("config.json"), "{}: {} has neither adapter_config.json nor config.json",
                repo.display(), where);
  } else {
    VKF_REQUIRE(has("tokenizer.json"), "{}: {} has no tokenizer.json (files: {})", repo.display(), where,
                fmt::join(snap.files, ", "));
  }
  return snap.dir.string();
}

}  // namespace vkf::hub
