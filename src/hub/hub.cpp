// The Hub client (see hub.h): API listing, HEAD metadata, resumable verified downloads into the
// shared cache, offline answers from the cache.
#include "hub/hub.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "hub/http.h"
#include "hub/progress.h"
#include "vk/error.h"

namespace vkf::hub {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// huggingface_hub's defaults: 5 retries, waits doubling from 1 s up to 8 s; HF_HUB_DOWNLOAD_TIMEOUT
// seconds without data is a stall. VKF_HUB_RETRIES / VKF_HUB_RETRY_WAIT_MS change them (tests).
int max_retries() { return env_int("VKF_HUB_RETRIES", 5); }
long stall_timeout() { return env_int("HF_HUB_DOWNLOAD_TIMEOUT", 10); }

void backoff(int attempt, const HttpResponse& r) {
  const int base = env_int("VKF_HUB_RETRY_WAIT_MS", 1000);
  int ms = std::min(base << std::min(attempt, 10), std::max(base, 8000));
  const std::string after = r.header("retry-after");
  if (!after.empty() && std::atoi(after.c_str()) > 0) ms = std::min(std::atoi(after.c_str()) * 1000, 60000);
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// Worth another try: a broken or stalled transfer, 429, 5xx. A host that cannot be resolved or
// connected to is not (huggingface_hub does not retry those either): offline is answered at once.
bool transient(const HttpResponse& r) {
  return (!r.transport_error.empty() && !r.no_connection) || r.status == 429 || r.status >= 500;
}

enum class Failure { None, Unreachable, NotFound, Denied, Other };

struct Answer {
  HttpResponse resp;
  Failure failure = Failure::None;
  std::string message;  // what went wrong, for errors
  std::string url;      // the URL that answered, after relative redirects
};

std::string describe(const HttpResponse& r) {
  if (!r.transport_error.empty()) return r.transport_error;
  std::string detail = r.header("x-error-message");
  if (detail.empty() && !r.body.empty()) {
    try {
      const json j = json::parse(r.body);
      if (j.is_object() && j.contains("error") && j["error"].is_string()) detail = j["error"];
    } catch (const json::exception&) {
    }
  }
  return fmt::format("HTTP {}{}", r.status, detail.empty() ? "" : ": " + detail);
}

Answer classify(HttpResponse r) {
  Answer a;
  a.message = describe(r);
  const std::string code = r.header("x-error-code");
  if (!r.transport_error.empty() || r.status == 429 || r.status >= 500) a.failure = Failure::Unreachable;
  else if (r.status == 404 && code != "RepoNotFound") a.failure = Failure::NotFound;
  else if (r.status == 401 || r.status == 403 || r.status == 404) a.failure = Failure::Denied;
  else if (r.status >= 400 || r.status < 200) a.failure = Failure::Other;
  a.resp = std::move(r);
  return a;
}

// A request with retries on transient failures, following relative redirects (a renamed
// repository) but not absolute ones (the storage host: the caller decides).
Answer request(HttpRequest req) {
  for (int hops = 0; hops < 10; ++hops) {
    HttpResponse r;
    for (int attempt = 0;; ++attempt) {
      r = http_request(req);
      if (!transient(r) || attempt >= max_retries()) break;
      backoff(attempt, r);
    }
    const std::string loc = r.header("location");
    if (r.status >= 300 && r.status < 400 && !loc.empty() && loc.find("://") == std::string::npos) {
      req.url = resolve_url(req.url, loc);
      continue;
    }
    Answer a = classify(std::move(r));
    a.url = req.url;
    return a;
  }
  fail("{}: more than 10 redirects", req.url);
}

std::string access_help(const Settings& s) {
  return fmt::format("the repository does not exist, or it is private or gated and needs a token with access: "
                     "set HF_TOKEN or put the token in {}", (s.cache_dir.parent_path() / "token").string());
}

[[noreturn]] void fail_answer(const Answer& a, const RepoRef& repo, const std::string& what, const Settings& s) {
  if (a.failure == Failure::Denied)
    fail("{}: the Hub refused {} ({}); {}", repo.display(), what, a.message, access_help(s));
  if (a.failure == Failure::NotFound && a.resp.header("x-error-code") == "RevisionNotFound")
    fail("{}: the Hub has no revision '{}' ({})", repo.display(), repo.revision, a.message);
  fail("{}: {} failed ({})", repo.display(), what, a.message);
}

std::vector<std::string> auth(const Settings& s) {
  if (s.token.empty()) return {};
  return {"Authorization: Bearer " + s.token};
}

std::string normalize_etag(std::string e) {
  if (e.rfind("W/", 0) == 0) e = e.substr(2);
  if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
  return e;
}

struct Meta {
  std::string commit, etag, location;
  int64_t size = -1;
};

std::string resolve_url_of(const Settings& s, const RepoRef& repo, const std::string& file) {
  return fmt::format("{}/{}{}/resolve/{}/{}", s.endpoint, repo.url_prefix(), repo.id, url_quote(repo.revision, false),
                     url_quote(file, true));
}

// HEAD of a file: where to download it from, its blob name, size and commit.
Answer head(const Settings& s, const RepoRef& repo, const std::string& file, Meta& meta) {
  HttpRequest req;
  req.method = "HEAD";
  req.url = resolve_url_of(s, repo, file);
  req.headers = auth(s);
  req.headers.push_back("Accept-Encoding: identity");  // the real size, not a compressed one
  req.stall_timeout_s = stall_timeout();
  Answer a = request(req);
  if (a.failure != Failure::None) return a;
  const HttpResponse& r = a.resp;
  meta.commit = r.header("x-repo-commit");
  meta.etag = normalize_etag(!r.header("x-linked-etag").empty() ? r.header("x-linked-etag") : r.header("etag"));
  const std::string size = !r.header("x-linked-size").empty() ? r.header("x-linked-size") : r.header("content-length");
  meta.size = size.empty() ? -1 : std::atoll(size.c_str());
  meta.location = r.status >= 300 && r.status < 400 ? r.header("location") : a.url;
  VKF_REQUIRE(!meta.commit.empty() && !meta.etag.empty() && meta.size >= 0,
              "{}: {} answered without X-Repo-Commit, ETag or size headers; HF_ENDPOINT={} does not look like a "
              "Hugging Face Hub", repo.display(), req.url, s.endpoint);
  VKF_REQUIRE(is_commit_hash(meta.commit), "{}: the server named '{}' as the commit of {}", repo.display(), meta.commit, file);
  check_etag(meta.etag);
  return a;
}

// Downloads `url` into `blob`.incomplete (resuming what is there), verifies size and hash, and
// renames it to `blob`. The token goes only to the Hub's own origin.
void download_blob(const Settings& s, const std::string& url, const fs::path& blob, const std::string& etag, int64_t size,
                   const std::string& name, Progress& progress) {
  const fs::path incomplete = blob.string() + ".incomplete";
  const bool same_origin = url_origin(url) == url_origin(s.endpoint);
  for (int round = 0; round < 2; ++round) {
    const int fd = ::open(incomplete.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    VKF_REQUIRE(fd >= 0, "{}: cannot open for writing ({})", incomplete.string(), std::strerror(errno));
    int64_t have = ::lseek(fd, 0, SEEK_END);
    if (size >= 0 && have > size) {
      VKF_REQUIRE(::ftruncate(fd, 0) == 0, "{}: cannot truncate", incomplete.string());
      have = 0;
    }
    progress.start_file(name, size, have);
    int failures = 0;
    std::string last_error;
    while (size < 0 || have < size) {
      HttpRequest req;
      req.url = url;
      req.headers = same_origin ? auth(s) : std::vector<std::string>{};
      req.stall_timeout_s = stall_timeout();
      const int64_t start = have;
      if (have > 0) req.headers.push_back(fmt::format("Range: bytes={}-", have));
      bool first = true;
      std::string write_error;
      req.sink = [&](const HttpResponse& r, const char* d, size_t n) {
        if (first) {
          first = false;
          // A server that ignores the Range sends the whole file again: start over.
          if (have > 0 && r.status == 200) {
            if (::ftruncate(fd, 0) != 0) return false;
            progress.advance(-have);
            have = 0;
          }
        }
        for (size_t done = 0; done < n;) {
          const ssize_t w = ::write(fd, d + done, n - done);
          if (w < 0 && errno == EINTR) continue;
          if (w <= 0) {
            write_error = std::strerror(errno);
            return false;
          }
          done += static_cast<size_t>(w);
        }
        have += static_cast<int64_t>(n);
        progress.advance(static_cast<int64_t>(n));
        return true;
      };
      const HttpResponse r = http_request(req);
      if (!write_error.empty()) {
        ::close(fd);
        fail("{}: cannot write ({}); {} bytes are kept there to resume", incomplete.string(), write_error, have);
      }
      if (r.status == 416) {  // our partial file does not fit the blob: start over
        VKF_REQUIRE(::ftruncate(fd, 0) == 0, "{}: cannot truncate", incomplete.string());
        progress.advance(-have);
        have = 0;
      }
      const bool ok = r.transport_error.empty() && (r.status == 200 || r.status == 206);
      if (ok && size < 0) break;
      if (ok && have == size) break;
      if (have > start) failures = 0;  // progress resets the retry budget, as huggingface_hub does
      last_error = ok ? fmt::format("the body ended at byte {} of {}", have, size) : describe(r);
      if (!ok && !transient(r) && r.status != 416) {
        ::close(fd);
        fail("{}: downloading {} failed ({})", name, url, last_error);
      }
      if (++failures > max_retries()) {
        ::close(fd);
        fail("{}: downloading failed {} times, last: {}; the {} bytes received are kept in {} and the next attempt "
             "resumes from there", name, failures, last_error, have, incomplete.string());
      }
      backoff(failures - 1, r);
    }
    const bool synced = ::fsync(fd) == 0;
    ::close(fd);
    VKF_REQUIRE(synced, "{}: cannot flush to disk", incomplete.string());
    VKF_REQUIRE(size < 0 || have == size, "{}: received {} bytes where the Hub announced {}", name, have, size);
    const std::string mismatch = blob_mismatch(incomplete, etag);
    if (mismatch.empty()) {
      ::chmod(incomplete.c_str(), 0644);
      fs::rename(incomplete, blob);
      progress.finish_file(true);
      return;
    }
    fs::remove(incomplete);
    if (round == 0) {
      std::fprintf(stderr, "\nvkformer: %s: the download does not match its etag %s (%s); downloading it again\n",
                   name.c_str(), etag.c_str(), mismatch.c_str());
    } else {
      fail("{}: downloaded twice and both times it does not match its etag {} ({}); the server sends corrupt data. "
           "Nothing was stored", name, etag, mismatch);
    }
  }
}

// One file of a commit into the cache: nothing to do when its snapshot link is there and sound,
// a link when the blob is there, else a download.
fs::path fetch(const Settings& s, const Cache& cache, const RepoRef& repo, const std::string& commit, const FileInfo& info,
               const FetchOptions& o, Progress& progress, const Meta* known) {
  RepoRef at = repo;
  at.revision = commit;
  const fs::path pointer = cache.pointer_path(at, commit, info.path);
  std::error_code ec;
  if (fs::exists(pointer, ec)) {
    const std::string linked = fs::is_symlink(pointer) ? fs::read_symlink(pointer).filename().string() : "";
    std::string problem;
    if (!info.etag.empty() && !linked.empty() && linked != info.etag) problem = "it links to another blob";
    else if (info.size >= 0 && static_cast<int64_t>(fs::file_size(pointer)) != info.size) problem = "its size differs";
    else if (o.verify && !linked.empty()) problem = blob_mismatch(pointer, linked);
    if (problem.empty()) {
      progress.start_file(info.path, info.size, 0);
      progress.finish_file(false);
      return pointer;
    }
    std::fprintf(stderr, "vkformer: %s: the cached copy is corrupt (%s); fetching it again\n", info.path.c_str(),
                 problem.c_str());
    if (!linked.empty() && fs::is_symlink(pointer)) fs::remove(cache.blob_path(repo, linked), ec);
  }
  Meta meta;
  if (known) {
    meta = *known;
  } else {
    const Answer a = head(s, at, info.path, meta);
    if (a.failure != Failure::None) fail_answer(a, at, "the metadata of " + info.path, s);
  }
  const fs::path blob = cache.blob_path(repo, meta.etag);
  fs::create_directories(blob.parent_path());
  FileLock lock(cache.lock_path(repo, meta.etag));
  if (fs::exists(blob, ec)) {
    const bool sound = static_cast<int64_t>(fs::file_size(blob)) == meta.size && (!o.verify || blob_mismatch(blob, meta.etag).empty());
    if (sound) {
      cache.link(at, commit, info.path, meta.etag);
      progress.start_file(info.path, meta.size, 0);
      progress.finish_file(false);
      return pointer;
    }
    std::fprintf(stderr, "vkformer: %s: the cached blob %s is corrupt; fetching it again\n", info.path.c_str(),
                 meta.etag.c_str());
    fs::remove(blob);
  }
  download_blob(s, meta.location, blob, meta.etag, meta.size, info.path, progress);
  cache.link(at, commit, info.path, meta.etag);
  return pointer;
}

Listing parse_listing(const std::string& body, const RepoRef& repo) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    fail("{}: the Hub API answered with something that is not JSON ({})", repo.display(), e.what());
  }
  VKF_REQUIRE(j.is_object() && j.contains("sha") && j["sha"].is_string() && j.contains("siblings") && j["siblings"].is_array(),
              "{}: the Hub API answer lacks \"sha\" or \"siblings\"", repo.display());
  Listing l;
  l.commit = j["sha"];
  VKF_REQUIRE(is_commit_hash(l.commit), "{}: the Hub API named '{}' as the commit", repo.display(), l.commit);
  for (const auto& f : j["siblings"]) {
    VKF_REQUIRE(f.is_object() && f.contains("rfilename") && f["rfilename"].is_string(),
                "{}: a file entry without \"rfilename\" in the Hub API answer", repo.display());
    FileInfo info;
    info.path = f["rfilename"];
    check_repo_filename(info.path);
    if (f.contains("lfs") && f["lfs"].is_object()) {
      info.etag = f["lfs"].value("sha256", "");
      info.size = f["lfs"].value("size", int64_t{-1});
    } else {
      info.etag = f.value("blobId", "");
      info.size = f.value("size", int64_t{-1});
    }
    l.files.push_back(info);
  }
  return l;
}

Answer list_impl(const Settings& s, const RepoRef& repo, Listing& out) {
  HttpRequest req;
  req.url = fmt::format("{}/api/{}/{}/revision/{}?blobs=true", s.endpoint, repo.type_plural(), repo.id,
                        url_quote(repo.revision, false));
  req.headers = auth(s);
  req.stall_timeout_s = stall_timeout();
  Answer a = request(req);
  if (a.failure == Failure::None) out = parse_listing(a.resp.body, repo);
  return a;
}

Snapshot from_cache(const Cache& cache, const RepoRef& repo, const FileSelector& select, const std::string& why) {
  const auto commit = cache.commit_for(repo);
  const std::string how = fmt::format("run `vkformer pull {}` where the Hub can be reached{}", repo.display(),
                                      why.find("HF_HUB_OFFLINE") != std::string::npos ? " (without HF_HUB_OFFLINE)" : "");
  VKF_REQUIRE(commit.has_value(), "{}: not in the hub cache {} (no refs/{}), and {}; {}", repo.display(),
              cache.root().string(), repo.revision, why, how);
  Snapshot snap;
  snap.from_cache = true;
  snap.commit = *commit;
  snap.dir = cache.snapshot_dir(repo, *commit);
  VKF_REQUIRE(fs::is_directory(snap.dir), "{}: the hub cache has no snapshot of commit {} ({}), and {}; {}", repo.display(),
              *commit, snap.dir.string(), why, how);
  const auto all = cache.list_snapshot(repo, *commit);
  snap.files = select ? select(all) : all;
  for (const auto& f : snap.files)
    VKF_REQUIRE(fs::exists(snap.dir / f), "{}: the cached {} links to a blob that is missing ({}), and {}; {}",
                repo.display(), f, (snap.dir / f).string(), why, how);
  return snap;
}

}  // namespace

Hub::Hub(Settings settings) : settings_(std::move(settings)), cache_(settings_.cache_dir) {}

Listing Hub::list(const RepoRef& repo) const {
  VKF_REQUIRE(!settings_.offline, "{}: cannot list the files on the Hub: HF_HUB_OFFLINE is set", repo.display());
  Listing l;
  const Answer a = list_impl(settings_, repo, l);
  if (a.failure != Failure::None) fail_answer(a, repo, "listing the files", settings_);
  return l;
}

std::optional<fs::path> Hub::file(const RepoRef& repo, const std::string& name, const FetchOptions& o) const {
  check_repo_filename(name);
  auto from_cache_only = [&](const std::string& why) -> std::optional<fs::path> {
    const auto commit = cache_.commit_for(repo);
    if (commit && cache_.known_missing(repo, *commit, name)) return std::nullopt;
    if (commit && fs::exists(cache_.pointer_path(repo, *commit, name))) return cache_.pointer_path(repo, *commit, name);
    fail("{}: {} is not in the hub cache {}, and {}; run `vkformer pull {}` where the Hub can be reached", repo.display(),
         name, cache_.root().string(), why, repo.display());
  };
  if (settings_.offline) return from_cache_only("HF_HUB_OFFLINE is set");
  if (is_commit_hash(repo.revision) && fs::exists(cache_.pointer_path(repo, repo.revision, name)) && !o.verify)
    return cache_.pointer_path(repo, repo.revision, name);
  Meta meta;
  const Answer a = head(settings_, repo, name, meta);
  if (a.failure == Failure::NotFound && a.resp.header("x-error-code") != "RevisionNotFound") {
    const std::string commit = a.resp.header("x-repo-commit");
    if (is_commit_hash(commit)) {
      cache_.mark_missing(repo, commit, name);
      cache_.write_ref(repo, commit);
    }
    return std::nullopt;
  }
  if (a.failure == Failure::Unreachable) return from_cache_only("the Hub cannot be reached (" + a.message + ")");
  if (a.failure != Failure::None) fail_answer(a, repo, "fetching " + name, settings_);
  cache_.write_ref(repo, meta.commit);
  Progress progress(1, meta.size, o.quiet);
  const fs::path p = fetch(settings_, cache_, repo, meta.commit, FileInfo{name, meta.size, meta.etag}, o, progress, &meta);
  progress.done();
  return p;
}

Snapshot Hub::snapshot(const RepoRef& repo, const FileSelector& select, const FetchOptions& o) const {
  if (settings_.offline) return from_cache(cache_, repo, select, "HF_HUB_OFFLINE is set");
  Listing listing;
  const Answer a = list_impl(settings_, repo, listing);
  if (a.failure == Failure::Unreachable) {
    std::fprintf(stderr, "vkformer: cannot reach %s (%s); using the hub cache\n", settings_.endpoint.c_str(), a.message.c_str());
    return from_cache(cache_, repo, select, "the Hub cannot be reached (" + a.message + ")");
  }
  if (a.failure != Failure::None) fail_answer(a, repo, "listing the files", settings_);
  std::vector<std::string> names;
  for (const auto& f : listing.files) names.push_back(f.path);
  Snapshot snap;
  snap.commit = listing.commit;
  snap.dir = cache_.snapshot_dir(repo, listing.commit);
  snap.files = select ? select(names) : names;
  cache_.write_ref(repo, listing.commit);
  int64_t total = 0;
  std::vector<const FileInfo*> to_fetch;
  for (const auto& f : snap.files) {
    for (const auto& info : listing.files)
      if (info.path == f) to_fetch.push_back(&info);
  }
  for (const FileInfo* f : to_fetch) total += std::max<int64_t>(0, f->size);
  Progress progress(static_cast<int>(to_fetch.size()), total, o.quiet);
  for (const FileInfo* f : to_fetch) fetch(settings_, cache_, repo, listing.commit, *f, o, progress, nullptr);
  progress.done();
  return snap;
}

bool glob_match(const std::string& pattern, const std::string& path) {
  std::string p = pattern;
  if (!p.empty() && p.back() == '/') p += "*";
  return ::fnmatch(p.c_str(), path.c_str(), 0) == 0;
}

FileSelector select_globs(const std::vector<std::string>& patterns) {
  return [patterns](const std::vector<std::string>& all) {
    if (patterns.empty()) return all;
    std::vector<std::string> out;
    for (const auto& f : all)
      for (const auto& p : patterns)
        if (glob_match(p, f)) {
          out.push_back(f);
          break;
        }
    return out;
  };
}

}  // namespace vkf::hub
