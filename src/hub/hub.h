// The Hugging Face Hub client, following huggingface_hub's conventions so that both share one
// cache: the file list of a revision from the Hub API (/api/{models,datasets}/{id}/revision/{rev}
// ?blobs=true), file metadata from a HEAD of {endpoint}/{prefix}{id}/resolve/{rev}/{file}
// (X-Repo-Commit, X-Linked-Etag / ETag, X-Linked-Size / Content-Length, Location of the storage
// host), bearer tokens (never sent to another host), downloads into blobs/<etag>.incomplete that
// resume with Range requests, retries with exponential backoff, sha256 / git-sha1 verification
// before a blob is renamed into place, then the snapshot symlink. HF_HUB_OFFLINE=1 answers from the
// cache alone; errors say what is missing and how to get it.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "hub/cache.h"
#include "hub/repo.h"

namespace vkf::hub {

struct FileInfo {
  std::string path;
  int64_t size = -1;  // -1 unknown
  std::string etag;   // the blob name: LFS sha256 or git blob sha1; "" unknown
};

struct Listing {
  std::string commit;
  std::vector<FileInfo> files;
};

struct FetchOptions {
  bool verify = false;  // hash every cached blob too (a corrupt one is fetched again)
  bool quiet = false;   // no progress output
};

struct Snapshot {
  std::filesystem::path dir;       // snapshots/<commit>
  std::string commit;
  std::vector<std::string> files;  // the selected files, all present under dir
  bool from_cache = false;         // answered from the cache alone (offline or Hub unreachable)
};

// Picks, from every file of a revision, those to fetch.
using FileSelector = std::function<std::vector<std::string>(const std::vector<std::string>& all)>;

class Hub {
 public:
  explicit Hub(Settings settings = Settings::from_environment());
  const Settings& settings() const { return settings_; }
  const Cache& cache() const { return cache_; }

  // The commit and files of a revision, from the Hub API. Every file name is validated first (an
  // unsafe one is an error naming it).
  Listing list(const RepoRef& repo) const;
  // One file: its path in the snapshot (downloaded unless cached), or nullopt when the repository
  // has no such file (remembered as a .no_exist marker, as huggingface_hub does).
  std::optional<std::filesystem::path> file(const RepoRef& repo, const std::string& name, const FetchOptions& o = {}) const;
  // The files `select` picks (every file when null), downloaded unless cached. Offline, or when the
  // Hub cannot be reached, the cached snapshot of the revision (and `select` applied to its files).
  Snapshot snapshot(const RepoRef& repo, const FileSelector& select, const FetchOptions& o = {}) const;

 private:
  Settings settings_;
  Cache cache_;
};

// Python fnmatch semantics ('*' also matches '/'), with a trailing '/' meaning "everything under".
bool glob_match(const std::string& pattern, const std::string& path);
FileSelector select_globs(const std::vector<std::string>& patterns);  // all files when empty

}  // namespace vkf::hub
