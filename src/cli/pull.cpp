// `vkformer pull org/name[@revision]`: downloads a Hub repository (or the files matching --include)
// into the shared Hugging Face cache, verifying every blob (cached ones too: a corrupt one is fetched
// again), and prints the snapshot folder. Same cache, same files as huggingface_hub's snapshot_download.
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "hub/hub.h"
#include "hub/progress.h"
#include "vk/error.h"

namespace vkf::cli {
namespace {

struct PullArgs {
  std::string repo;
  std::vector<std::string> include;
  bool dataset = false, quiet = false;
};

int run(const PullArgs& a) {
  const hub::RepoRef repo = hub::parse_repo(a.repo, a.dataset ? hub::RepoType::Dataset : hub::RepoType::Model);
  const hub::Hub h;
  hub::FetchOptions o;
  o.verify = true;
  o.quiet = a.quiet;
  const hub::Snapshot snap = h.snapshot(repo, hub::select_globs(a.include), o);
  VKF_REQUIRE(!snap.files.empty(), "{}: no file matches --include {}", repo.display(), fmt::join(a.include, " "));
  int64_t bytes = 0;
  for (const auto& f : snap.files) bytes += static_cast<int64_t>(std::filesystem::file_size(snap.dir / f));
  if (!a.quiet)
    std::fprintf(stderr, "%s: %zu files, %s, commit %s%s\n", repo.display().c_str(), snap.files.size(),
               hub::human_bytes(bytes).c_str(), snap.commit.c_str(), snap.from_cache ? " (from the cache)" : "");
  std::printf("%s\n", snap.dir.string().c_str());
  return 0;
}

}  // namespace

void add_pull_command(CLI::App& app, int& exit_code) {
  static PullArgs a;
  auto* c = app.add_subcommand("pull", "Download a Hugging Face Hub repository into the shared cache");
  c->add_option("repo", a.repo, "org/name or org/name@revision (branch, tag or commit)")->required();
  c->add_option("--include", a.include, "only files matching this glob (repeatable; '*' crosses folders)");
  c->add_flag("--dataset", a.dataset, "a dataset repository (same as datasets/org/name)");
  c->add_flag("--quiet,-q", a.quiet, "no progress or summary output (the folder is still printed)");
  c->footer("Environment: HF_ENDPOINT, HF_HOME, HF_HUB_CACHE, HF_TOKEN (or $HF_HOME/token), HF_HUB_OFFLINE=1.");
  c->callback([&exit_code] { exit_code = run(a); });
}

}  // namespace vkf::cli
