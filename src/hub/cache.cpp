// The shared hub cache (see cache.h): paths, refs, symlinks, markers, blob hashes and locks.
#include "hub/cache.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "vk/error.h"

namespace vkf::hub {
namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool truthy(const std::string& v) {
  std::string l;
  for (char c : v) l += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return l == "1" || l == "true" || l == "yes" || l == "on";
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  return s.substr(b);
}

fs::path expand_user(const std::string& p) {
  if (p.rfind("~/", 0) == 0 || p == "~") return fs::path(env("HOME")) / p.substr(std::min<size_t>(2, p.size()));
  return p;
}

// Creates `rel`'s folders below `base` one at a time, refusing any component that exists as
// something other than a real folder (a symlink planted there could lead outside the cache).
void make_dirs_inside(const fs::path& base, const fs::path& rel) {
  fs::path cur = base;
  for (const auto& part : rel) {
    cur /= part;
    struct stat st {};
    if (::lstat(cur.c_str(), &st) == 0) {
      VKF_REQUIRE(S_ISDIR(st.st_mode), "{}: exists and is not a folder (a symlink or a file); refusing to write through it",
                  cur.string());
      continue;
    }
    VKF_REQUIRE(::mkdir(cur.c_str(), 0755) == 0 || errno == EEXIST, "{}: cannot create the folder ({})", cur.string(),
                std::strerror(errno));
  }
}

std::string digest_file(const fs::path& path, const EVP_MD* md, const std::string& prefix) {
  std::ifstream in(path, std::ios::binary);
  VKF_REQUIRE(in, "{}: cannot open to verify it", path.string());
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  VKF_REQUIRE(ctx && EVP_DigestInit_ex(ctx.get(), md, nullptr) == 1, "OpenSSL digest initialisation failed");
  EVP_DigestUpdate(ctx.get(), prefix.data(), prefix.size());
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(in.gcount()));
  }
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), out, &len);
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", out[i]);
  return hex;
}

bool all_hex(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f'); });
}

}  // namespace

Settings Settings::from_environment() {
  Settings s;
  s.endpoint = env("HF_ENDPOINT").empty() ? "https://huggingface.co" : env("HF_ENDPOINT");
  while (!s.endpoint.empty() && s.endpoint.back() == '/') s.endpoint.pop_back();
  const std::string xdg = env("XDG_CACHE_HOME");
  const fs::path home = !env("HF_HOME").empty() ? expand_user(env("HF_HOME"))
                        : !xdg.empty()          ? fs::path(xdg) / "huggingface"
                                                : fs::path(env("HOME")) / ".cache/huggingface";
  s.cache_dir = !env("HF_HUB_CACHE").empty()            ? expand_user(env("HF_HUB_CACHE"))
                : !env("HUGGINGFACE_HUB_CACHE").empty() ? expand_user(env("HUGGINGFACE_HUB_CACHE"))
                                                        : home / "hub";
  s.token = trim(env("HF_TOKEN"));
  if (s.token.empty()) {
    const fs::path token_file = !env("HF_TOKEN_PATH").empty() ? expand_user(env("HF_TOKEN_PATH")) : home / "token";
    std::ifstream in(token_file);
    if (in) {
      std::stringstream ss;
      ss << in.rdbuf();
      s.token = trim(ss.str());
    }
  }
  s.offline = truthy(env("HF_HUB_OFFLINE"));
  return s;
}

fs::path Cache::repo_dir(const RepoRef& repo) const {
  check_repo_id(repo.id);
  return root_ / repo.folder_name();
}

std::optional<std::string> Cache::commit_for(const RepoRef& repo) const {
  if (is_commit_hash(repo.revision)) return repo.revision;
  check_revision(repo.revision);
  std::ifstream in(repo_dir(repo) / "refs" / repo.revision);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string commit = trim(ss.str());
  VKF_REQUIRE(is_commit_hash(commit), "{}: holds '{}', not a commit hash; delete it and fetch again",
              (repo_dir(repo) / "refs" / repo.revision).string(), commit);
  return commit;
}

void Cache::write_ref(const RepoRef& repo, const std::string& commit) const {
  VKF_REQUIRE(is_commit_hash(commit), "{}: the server named '{}' as the commit, not a 40-digit hash", repo.display(), commit);
  if (repo.revision == commit) return;
  if (commit_for(repo) == commit) return;
  check_revision(repo.revision);
  const fs::path ref = repo_dir(repo) / "refs" / repo.revision;
  fs::create_directories(root_);
  make_dirs_inside(root_, fs::path(repo.folder_name()) / "refs" / fs::path(repo.revision).parent_path());
  const fs::path tmp = ref.parent_path() / fmt::format(".{}.tmp-{}", ref.filename().string(), ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << commit;  // no newline: huggingface_hub reads the file verbatim
    VKF_REQUIRE(out.good(), "{}: cannot write", tmp.string());
  }
  fs::rename(tmp, ref);
}

fs::path Cache::snapshot_dir(const RepoRef& repo, const std::string& commit) const {
  VKF_REQUIRE(is_commit_hash(commit), "'{}' is not a commit hash", commit);
  return repo_dir(repo) / "snapshots" / commit;
}

fs::path Cache::pointer_path(const RepoRef& repo, const std::string& commit, const std::string& file) const {
  check_repo_filename(file);
  return snapshot_dir(repo, commit) / file;
}

void check_etag(const std::string& etag) {
  VKF_REQUIRE(!etag.empty() && etag.size() <= 128 && etag.front() != '.' &&
                  std::all_of(etag.begin(), etag.end(), [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
                  }),
              "refusing the server's ETag '{}' as a blob name (expected a hex digest)", etag);
}

fs::path Cache::blob_path(const RepoRef& repo, const std::string& etag) const {
  check_etag(etag);
  return repo_dir(repo) / "blobs" / etag;
}

fs::path Cache::lock_path(const RepoRef& repo, const std::string& etag) const {
  check_etag(etag);
  return root_ / ".locks" / repo.folder_name() / (etag + ".lock");
}

bool Cache::known_missing(const RepoRef& repo, const std::string& commit, const std::string& file) const {
  check_repo_filename(file);
  return is_commit_hash(commit) && fs::is_regular_file(repo_dir(repo) / ".no_exist" / commit / file);
}

void Cache::mark_missing(const RepoRef& repo, const std::string& commit, const std::string& file) const {
  check_repo_filename(file);
  VKF_REQUIRE(is_commit_hash(commit), "'{}' is not a commit hash", commit);
  fs::create_directories(root_);
  make_dirs_inside(root_, fs::path(repo.folder_name()) / ".no_exist" / commit / fs::path(file).parent_path());
  std::ofstream(repo_dir(repo) / ".no_exist" / commit / file, std::ios::app);
}

void Cache::link(const RepoRef& repo, const std::string& commit, const std::string& file, const std::string& etag) const {
  const fs::path pointer = pointer_path(repo, commit, file);
  check_etag(etag);
  make_dirs_inside(root_, fs::path(repo.folder_name()) / "snapshots" / commit / fs::path(file).parent_path());
  // snapshots/<commit>/a/b/file -> ../../../../blobs/<etag>: one ".." per folder below the repo.
  std::string target;
  const size_t depth = 2 + static_cast<size_t>(std::count(file.begin(), file.end(), '/'));
  for (size_t i = 0; i < depth; ++i) target += "../";
  target += "blobs/" + etag;
  const fs::path tmp = pointer.parent_path() / fmt::format(".{}.link-{}", pointer.filename().string(), ::getpid());
  ::unlink(tmp.c_str());
  VKF_REQUIRE(::symlink(target.c_str(), tmp.c_str()) == 0, "{}: cannot create a symlink ({})", tmp.string(), std::strerror(errno));
  // rename() replaces a stale link atomically, so no reader ever sees the file missing.
  if (::rename(tmp.c_str(), pointer.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail("{}: cannot place the snapshot link ({})", pointer.string(), std::strerror(err));
  }
}

std::vector<std::string> Cache::list_snapshot(const RepoRef& repo, const std::string& commit) const {
  std::vector<std::string> out;
  const fs::path dir = snapshot_dir(repo, commit);
  if (!fs::is_directory(dir)) return out;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator(); ++it) {
    if (it->is_directory() && !it->is_symlink()) continue;
    const std::string rel = it->path().lexically_relative(dir).generic_string();
    if (rel.find("/.") != std::string::npos || rel.front() == '.') continue;  // temporaries
    out.push_back(rel);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string sha256_file(const fs::path& path) { return digest_file(path, EVP_sha256(), ""); }

std::string git_blob_sha1_file(const fs::path& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  VKF_REQUIRE(!ec, "{}: cannot read ({})", path.string(), ec.message());
  std::string header = fmt::format("blob {}", size);
  header.push_back('\0');
  return digest_file(path, EVP_sha1(), header);
}

std::string blob_mismatch(const fs::path& blob, const std::string& etag) {
  if (etag.size() == 64 && all_hex(etag)) {
    const std::string got = sha256_file(blob);
    return got == etag ? "" : fmt::format("its sha256 is {}", got);
  }
  if (etag.size() == 40 && all_hex(etag)) {
    const std::string got = git_blob_sha1_file(blob);
    return got == etag ? "" : fmt::format("its git blob sha1 is {}", got);
  }
  return "";
}

FileLock::FileLock(const fs::path& path) {
  fs::create_directories(path.parent_path());
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  VKF_REQUIRE(fd_ >= 0, "{}: cannot open the lock file ({})", path.string(), std::strerror(errno));
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const int err = errno;
    ::close(fd_);
    fail("{}: cannot lock ({})", path.string(), std::strerror(err));
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
}

}  // namespace vkf::hub
