// The Hugging Face hub cache, laid out exactly as huggingface_hub lays it out, so that files
// downloaded by Python are used by vkformer without a download and the other way round:
//
//   $HF_HUB_CACHE (or $HF_HOME/hub, or ~/.cache/huggingface/hub)
//     .locks/models--org--name/<etag>.lock           flock()ed while a blob is written
//     models--org--name/
//       blobs/<etag>                                 file contents, named by sha256 (LFS files)
//                                                    or git blob sha1 (others); <etag>.incomplete
//                                                    while downloading (resumed from there)
//       refs/<revision>                              the commit hash, no newline
//       snapshots/<commit>/<path>                    relative symlinks to ../../blobs/<etag>
//       .no_exist/<commit>/<path>                    empty: the file is known not to exist
//
// Also the environment that huggingface_hub reads (HF_ENDPOINT, HF_HOME, HF_HUB_CACHE, HF_TOKEN,
// HF_TOKEN_PATH, HF_HUB_OFFLINE) and blob verification (a blob's content must hash to its name).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "hub/repo.h"

namespace vkf::hub {

struct Settings {
  std::string endpoint;             // HF_ENDPOINT, default https://huggingface.co (no trailing '/')
  std::filesystem::path cache_dir;  // HF_HUB_CACHE, else $HF_HOME/hub (HF_HOME default ~/.cache/huggingface)
  std::string token;                // HF_TOKEN, else the file HF_TOKEN_PATH or $HF_HOME/token; "" = none
  bool offline = false;             // HF_HUB_OFFLINE=1 (or true/yes/on)
  static Settings from_environment();
};

class Cache {
 public:
  explicit Cache(std::filesystem::path root) : root_(std::move(root)) {}
  const std::filesystem::path& root() const { return root_; }

  std::filesystem::path repo_dir(const RepoRef& repo) const;
  // The commit a revision names: itself when it is a commit hash, else the content of refs/<rev>.
  std::optional<std::string> commit_for(const RepoRef& repo) const;
  // Records refs/<revision> = commit (written to a temporary file and renamed; nothing when equal).
  void write_ref(const RepoRef& repo, const std::string& commit) const;
  std::filesystem::path snapshot_dir(const RepoRef& repo, const std::string& commit) const;
  std::filesystem::path pointer_path(const RepoRef& repo, const std::string& commit, const std::string& file) const;
  std::filesystem::path blob_path(const RepoRef& repo, const std::string& etag) const;
  std::filesystem::path lock_path(const RepoRef& repo, const std::string& etag) const;
  bool known_missing(const RepoRef& repo, const std::string& commit, const std::string& file) const;
  void mark_missing(const RepoRef& repo, const std::string& commit, const std::string& file) const;
  // snapshots/<commit>/<file> -> relative symlink to blobs/<etag> (replacing what was there). The
  // folders on the way are created and must be real folders, never symlinks.
  void link(const RepoRef& repo, const std::string& commit, const std::string& file, const std::string& etag) const;
  // Files in a snapshot (relative, '/'-separated, sorted); a dangling link is listed too.
  std::vector<std::string> list_snapshot(const RepoRef& repo, const std::string& commit) const;

 private:
  std::filesystem::path root_;
};

// An etag used as a blob file name: letters, digits, '-', '_', '.'; throws otherwise.
void check_etag(const std::string& etag);
// "" when `blob` hashes to `etag` (sha256 for 64 hex digits, git blob sha1 for 40; other etags
// cannot be checked and pass), else a description of the mismatch.
std::string blob_mismatch(const std::filesystem::path& blob, const std::string& etag);
std::string sha256_file(const std::filesystem::path& path);
std::string git_blob_sha1_file(const std::filesystem::path& path);

// Holds an exclusive flock() on a lock file for its lifetime (huggingface_hub's filelock uses the
// same call, so a Python download of the same blob waits for ours and the other way round).
class FileLock {
 public:
  explicit FileLock(const std::filesystem::path& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace vkf::hub
