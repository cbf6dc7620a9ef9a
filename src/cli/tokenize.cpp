// `vkformer tokenize`: encodes JSON-string lines from stdin (or decodes JSON id arrays with
// --decode) with a Hugging Face tokenizer, one JSON line out per line in.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "hub/resolve.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"
#include "vk/error.h"

namespace vkf::cli {
namespace {

struct TokenizeArgs {
  std::string path;
  bool no_special = false;
  bool decode = false;
};

int run_tokenize(const TokenizeArgs& a) {
  const Tokenizer tok = Tokenizer::load(hub::resolve_path(a.path, hub::Need::Tokenizer));
  std::string line;
  size_t n = 0;
  while (std::getline(std::cin, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    nlohmann::json in;
    try {
      in = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail("stdin line {}: not valid JSON ({}); give one JSON {} per line", n, e.what(),
           a.decode ? "array of ids" : "string");
    }
    if (a.decode) {
      VKF_REQUIRE(in.is_array(), "stdin line {}: expected a JSON array of token ids", n);
      std::vector<int32_t> ids;
      for (const auto& x : in) {
        VKF_REQUIRE(x.is_number_integer(), "stdin line {}: {} is not an integer id", n, x.dump());
        ids.push_back(x.get<int32_t>());
      }
      const nlohmann::json out = tok.decode(ids, a.no_special);
      std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    } else {
      VKF_REQUIRE(in.is_string(), "stdin line {}: expected a JSON string", n);
      const nlohmann::json out = tok.encode(in.get<std::string>(), !a.no_special);
      std::cout << out.dump() << '\n';
    }
  }
  std::cout.flush();
  return 0;
}

}  // namespace

void add_tokenize_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<TokenizeArgs>();
  auto* cmd = app.add_subcommand(
      "tokenize",
      "Encode JSON strings from stdin to id arrays (or decode id arrays with --decode), one JSON "
      "value per line, with a Hugging Face tokenizer");
  cmd->add_option("--tokenizer", args->path, "A model folder, a tokenizer.json file, or a Hub repository org/name[@rev]")->required();
  cmd->add_flag("--no-special", args->no_special,
                "Encode without the post-processor's special tokens; with --decode, skip special "
                "tokens");
  cmd->add_flag("--decode", args->decode, "Read JSON arrays of ids and write decoded strings");
  cmd->callback([args, &exit_code] { exit_code = run_tokenize(*args); });
}

}  // namespace vkf::cli

namespace vkf::cli {

// `vkformer tokenizer train --vocab-size N --out DIR FILE...`: a byte-level BPE tokenizer.
void add_tokenizer_command(CLI::App& app, int& exit_code) {
  static tok::BpeTrainerOptions options;
  static std::string out;
  static std::vector<std::string> files;
  auto* group = app.add_subcommand("tokenizer", "Tokenizer tools");
  group->require_subcommand(1);
  auto* t = group->add_subcommand("train", "Train a byte-level BPE tokenizer from text files");
  t->add_option("--vocab-size", options.vocab_size, "vocabulary size")->capture_default_str();
  t->add_option("--min-frequency", options.min_frequency, "merge only pairs seen this often")->capture_default_str();
  t->add_option("--out", out, "output folder (tokenizer.json, tokenizer_config.json)")->required();
  t->add_option("files", files, "text files")->required();
  t->callback([&exit_code] {
    const int64_t n = tok::train_tokenizer_files(files, out, options);
    std::printf("trained a byte-level BPE tokenizer with %lld tokens into %s\n", static_cast<long long>(n), out.c_str());
    exit_code = 0;
  });
}

}  // namespace vkf::cli
