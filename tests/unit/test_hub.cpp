// Hub names, cache and dataset conventions without a network: repository references and the
// names refused before they reach a path; the cache read the way huggingface_hub writes it
// (refs without newline, relative symlinks, .no_exist markers) offline; digests against published
// test vectors (FIPS 180 "abc", git's well-known empty-blob id); globs with Python fnmatch
// semantics; the Hub's split naming; CSV per RFC 4180.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "data/dataset.h"
#include "data/records.h"
#include "hub/cache.h"
#include "hub/hub.h"
#include "hub/repo.h"
#include "test_util.h"
#include "vk/error.h"

namespace vkf {
namespace {
namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / fmt::format("vkf_hub_{}_{}", ::getpid(), counter_++)) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

TEST(Hub, RepoReferences) {
  auto r = hub::parse_repo("acme/tiny");
  EXPECT_EQ(r.id, "acme/tiny");
  EXPECT_EQ(r.revision, "main");
  EXPECT_EQ(r.folder_name(), "models--acme--tiny");
  r = hub::parse_repo("datasets/acme/data@refs/pr/1");
  EXPECT_EQ(r.type, hub::RepoType::Dataset);
  EXPECT_EQ(r.revision, "refs/pr/1");
  EXPECT_EQ(r.folder_name(), "datasets--acme--data");
  EXPECT_EQ(hub::parse_repo("acme/data", hub::RepoType::Dataset).url_prefix(), "datasets/");
  EXPECT_EQ(hub::parse_repo("gpt2").folder_name(), "models--gpt2");
  for (const char* bad : {"../x", "acme/../x", "acme//x", "a/b/c", "-acme/x", "acme/x.", "acme/x--y", "acme/x@", "acme/x@../y",
                          "acme/x@/abs", "acme/x@a//b", "acme/x@a b", "acme/x y"})
    EXPECT_THROW(hub::parse_repo(bad), Error) << bad;
  EXPECT_TRUE(hub::looks_like_repo("acme/tiny@v1"));
  EXPECT_FALSE(hub::looks_like_repo("gpt2"));  // bare names are only taken as Hub ids by pull
  EXPECT_FALSE(hub::looks_like_repo("./model/dir"));
  EXPECT_EQ(hub::url_quote("refs/pr/1", false), "refs%2Fpr%2F1");
  EXPECT_EQ(hub::url_quote("a b/c+d.json", true), "a%20b/c%2Bd.json");
}

TEST(Hub, UnsafeFileNamesAreRefused) {
  for (const char* ok : {"config.json", "a/b/c.txt", "data/train-00000-of-00001.parquet", "..hidden", "x..y"})
    EXPECT_NO_THROW(hub::check_repo_filename(ok)) << ok;
  for (const char* bad : {"../escape", "a/../../b", "/etc/passwd", "a//b", "a/./b", "a/", "back\\slash", "", "..", "a/..",
                          "tab\there"})
    test::expect_error([&] { hub::check_repo_filename(bad); }, {"refusing the repository file name"});
  TempDir t;
  hub::Cache cache(t.path());
  const auto repo = hub::parse_repo("acme/x");
  const std::string commit(40, 'a');
  EXPECT_THROW(cache.pointer_path(repo, commit, "../../../x"), Error);
  EXPECT_THROW(cache.blob_path(repo, "../evil"), Error);
  EXPECT_THROW(cache.snapshot_dir(repo, "not-a-commit"), Error);
  // A folder inside a snapshot that is a symlink (planted to lead elsewhere) is not written through.
  fs::create_directories(t.path() / "outside");
  fs::create_directories(cache.snapshot_dir(repo, commit));
  fs::create_symlink(t.path() / "outside", cache.snapshot_dir(repo, commit) / "sub");
  test::expect_error([&] { cache.link(repo, commit, "sub/file.txt", std::string(64, 'b')); }, {"not a folder"});
  EXPECT_TRUE(fs::is_empty(t.path() / "outside"));
}

TEST(Hub, DigestsMatchPublishedVectors) {
  TempDir t;
  std::ofstream(t.path() / "abc", std::ios::binary) << "abc";
  std::ofstream(t.path() / "empty", std::ios::binary);
  EXPECT_EQ(hub::sha256_file(t.path() / "abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hub::git_blob_sha1_file(t.path() / "empty"), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
  EXPECT_EQ(hub::blob_mismatch(t.path() / "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"), "");
  EXPECT_NE(hub::blob_mismatch(t.path() / "abc", std::string(64, '0')), "");
  EXPECT_NE(hub::blob_mismatch(t.path() / "abc", "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"), "");
}

// A cache laid out the way huggingface_hub writes it, answered offline.
TEST(Hub, OfflineFromACacheWrittenLikeHuggingfaceHub) {
  TempDir t;
  const fs::path repo_dir = t.path() / "models--acme--tiny";
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  fs::create_directories(repo_dir / "blobs");
  fs::create_directories(repo_dir / "refs");
  fs::create_directories(repo_dir / "snapshots" / commit / "sub");
  fs::create_directories(repo_dir / ".no_exist" / commit);
  std::ofstream(repo_dir / "refs/main") << commit;  // no newline, as huggingface_hub writes it
  std::ofstream(repo_dir / ".no_exist" / commit / "chat_template.jinja");
  std::ofstream(repo_dir / "blobs/e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
  std::ofstream(repo_dir / "blobs/aa11") << "{}";
  fs::create_symlink("../../blobs/aa11", repo_dir / "snapshots" / commit / "config.json");
  fs::create_symlink("../../../blobs/e69de29bb2d1d6434b8b29ae775ad8c2e48c5391", repo_dir / "snapshots" / commit / "sub/empty.txt");
  fs::create_symlink("../../blobs/gone", repo_dir / "snapshots" / commit / "dangling.bin");

  hub::Settings s;
  s.endpoint = "http://127.0.0.1:9";  // never contacted: offline
  s.cache_dir = t.path();
  s.offline = true;
  const hub::Hub h(s);
  const auto repo = hub::parse_repo("acme/tiny");
  EXPECT_EQ(h.cache().commit_for(repo), commit);
  const auto cfg = h.file(repo, "config.json");
  ASSERT_TRUE(cfg.has_value());
  EXPECT_EQ(*cfg, repo_dir / "snapshots" / commit / "config.json");
  EXPECT_FALSE(h.file(repo, "chat_template.jinja").has_value());  // the .no_exist marker
  test::expect_error([&] { h.file(repo, "model.safetensors"); }, {"acme/tiny", "model.safetensors", "HF_HUB_OFFLINE"});
  const auto snap = h.snapshot(repo, hub::select_globs({"*.json", "sub/"}));
  EXPECT_TRUE(snap.from_cache);
  EXPECT_EQ(snap.files, (std::vector<std::string>{"config.json", "sub/empty.txt"}));
  test::expect_error([&] { h.snapshot(repo, nullptr); }, {"dangling.bin", "missing"});
  test::expect_error([&] { h.snapshot(hub::parse_repo("acme/tiny@v2"), nullptr); }, {"not in the hub cache", "refs/v2"});
  EXPECT_EQ(h.snapshot(hub::parse_repo("acme/tiny@" + commit), hub::select_globs({"config.json"})).dir,
            repo_dir / "snapshots" / commit);
}

TEST(Hub, SettingsFromTheEnvironment) {
  TempDir t;
  ::setenv("HF_HOME", t.path().c_str(), 1);
  ::unsetenv("HF_HUB_CACHE");
  ::unsetenv("HUGGINGFACE_HUB_CACHE");
  ::unsetenv("HF_TOKEN");
  ::unsetenv("HF_TOKEN_PATH");
  ::setenv("HF_ENDPOINT", "http://127.0.0.1:1234/", 1);
  ::setenv("HF_HUB_OFFLINE", "1", 1);
  std::ofstream(t.path() / "token") << "hf_abc\n";
  auto s = hub::Settings::from_environment();
  EXPECT_EQ(s.cache_dir, t.path() / "hub");
  EXPECT_EQ(s.token, "hf_abc");
  EXPECT_EQ(s.endpoint, "http://127.0.0.1:1234");
  EXPECT_TRUE(s.offline);
  ::setenv("HF_HUB_CACHE", (t.path() / "elsewhere").c_str(), 1);
  ::setenv("HF_TOKEN", "hf_env", 1);
  ::setenv("HF_HUB_OFFLINE", "0", 1);
  s = hub::Settings::from_environment();
  EXPECT_EQ(s.cache_dir, t.path() / "elsewhere");
  EXPECT_EQ(s.token, "hf_env");
  EXPECT_FALSE(s.offline);
  for (const char* v : {"HF_HOME", "HF_HUB_CACHE", "HF_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE"}) ::unsetenv(v);
}

TEST(Hub, GlobsFollowPythonFnmatch) {
  EXPECT_TRUE(hub::glob_match("*.json", "config.json"));
  EXPECT_TRUE(hub::glob_match("*.json", "onnx/config.json"));  // '*' crosses '/', as fnmatch does
  EXPECT_TRUE(hub::glob_match("data/", "data/train.parquet"));
  EXPECT_FALSE(hub::glob_match("data/", "other/train.parquet"));
  EXPECT_TRUE(hub::glob_match("model-0000[1-2]-of-*.safetensors", "model-00002-of-00004.safetensors"));
  EXPECT_FALSE(hub::glob_match("*.safetensors", "model.bin"));
}

TEST(Datasets, SplitsByFileName) {
  EXPECT_EQ(data::split_of("data/train-00000-of-00003.parquet"), "train");
  EXPECT_EQ(data::split_of("data/train_sft-00001-of-00002.parquet"), "train_sft");
  EXPECT_EQ(data::split_of("train.csv"), "train");
  EXPECT_EQ(data::split_of("my-test-file.jsonl"), "test");
  EXPECT_EQ(data::split_of("testfile.jsonl"), "");
  EXPECT_EQ(data::split_of("dev.json"), "validation");
  EXPECT_EQ(data::split_of("valid/part1.jsonl"), "validation");
  EXPECT_EQ(data::split_of("eval_2.jsonl"), "test");
  EXPECT_EQ(data::split_of("retrieval.jsonl"), "");
  EXPECT_EQ(data::split_of("training/x.parquet"), "train");
  const std::vector<std::string> files = {"README.md", "data/train-00000-of-00002.parquet",
                                          "data/train-00001-of-00002.parquet", "data/test-00000-of-00001.parquet",
                                          ".gitattributes"};
  EXPECT_EQ(data::files_for_split(files, "train", "d"),
            (std::vector<std::string>{"data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet"}));
  test::expect_error([&] { data::files_for_split(files, "validation", "acme/d"); },
                     {"acme/d", "no files for the split 'validation'", "test, train"});
  EXPECT_EQ(data::files_for_split({"a.jsonl", "b.csv", "README.md"}, "train", "d"), (std::vector<std::string>{"a.jsonl", "b.csv"}));
  test::expect_error([&] { data::files_for_split({"README.md"}, "train", "acme/d"); }, {"acme/d", "no data files"});
}

TEST(Datasets, CsvAndJsonRecords) {
  const auto rows = data::parse_csv("a,b\r\n\"x, \"\"quoted\"\"\",\"two\nlines\"\n,\"\"\n", ',', "t.csv");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[1], (std::vector<std::string>{"x, \"quoted\"", "two\nlines"}));
  EXPECT_EQ(rows[2], (std::vector<std::string>{std::string(1, '\0'), ""}));
  test::expect_error([&] { data::parse_csv("a\n\"open", ',', "bad.csv"); }, {"bad.csv", "never closed"});
  TempDir t;
  std::ofstream(t.path() / "r.csv") << "text,n\nhello,1\n,2\n";
  std::ofstream(t.path() / "a.json") << R"({"version": 1, "data": [{"text": "x"}, {"text": "y"}]})";
  std::ofstream(t.path() / "l.json") << "{\"text\": \"p\"}\n{\"text\": \"q\"}\n";
  std::ofstream(t.path() / "bad.csv") << "a,b\n1\n";
  std::vector<nlohmann::json> got;
  const auto collect = [&](nlohmann::json&& j, const std::string&) { got.push_back(j); };
  data::read_records((t.path() / "r.csv").string(), {}, collect);
  EXPECT_EQ(got, (std::vector<nlohmann::json>{{{"text", "hello"}, {"n", "1"}}, {{"text", nullptr}, {"n", "2"}}}));
  got.clear();
  data::read_records((t.path() / "a.json").string(), {}, collect);
  data::read_records((t.path() / "l.json").string(), {}, collect);
  EXPECT_EQ(got.size(), 4u);
  EXPECT_EQ(got[1]["text"], "y");
  EXPECT_EQ(got[3]["text"], "q");
  test::expect_error([&] { data::read_records((t.path() / "bad.csv").string(), {}, collect); }, {"bad.csv: row 2", "1 fields"});
}

}  // namespace
}  // namespace vkf
