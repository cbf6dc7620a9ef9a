// `vkformer generate` (one prompt, streamed to stdout) and `vkformer chat` (an interactive chat
// with the model's chat template): model folder -> tokenizer -> KV-cached generation -> text.
// A peft LoRA adapter applies with --adapter DIR, or by giving the adapter folder as --model (its
// base model is then adapter_config.json's base_model_name_or_path, as peft's AutoPeftModel does).
#include <unistd.h>

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "cli/model_args.h"
#include "core/autograd.h"
#include "infer/generate.h"
#include "models/decoder.h"
#include "peft/lora.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "vk/error.h"

namespace vkf::cli {
namespace {
namespace fs = std::filesystem;

struct GenArgs {
  std::string model, prompt, active_adapter;
  std::string dtype = "auto";
  std::vector<std::string> adapters;
  bool no_adapter = false;
  infer::GenerationConfig config;
  std::vector<std::string> stop;
  bool no_special = false;
};

void add_sampling_options(CLI::App* cmd, GenArgs& a) {
  cmd->add_option("--model", a.model, "Hugging Face model folder (weights + tokenizer), or a peft adapter "
                  "folder whose base_model_name_or_path is a local folder")->required();
  cmd->add_option("--adapter", a.adapters, "a peft LoRA adapter folder, [NAME=]DIR (repeatable: several "
                  "adapters on one base)");
  cmd->add_option("--active-adapter", a.active_adapter, "which loaded adapter to use (default: the first)");
  cmd->add_flag("--no-adapter", a.no_adapter, "load the adapters but run the base model (peft's "
                "disable_adapter)");
  cmd->add_option("--dtype", a.dtype,
                  "weight matrices on the device: auto (f16 for a 16-bit checkpoint, "
                  "f32 for an f32 one), f16 or f32")
      ->capture_default_str();
  cmd->add_option("--max-new-tokens", a.config.max_new_tokens, "tokens to generate")->capture_default_str();
  cmd->add_flag("--do-sample", a.config.do_sample, "sample instead of greedy decoding");
  cmd->add_option("--temperature", a.config.temperature, "sampling temperature")->capture_default_str();
  cmd->add_option("--top-k", a.config.top_k, "keep the k most likely tokens (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", a.config.top_p, "nucleus sampling mass (1 = off)")->capture_default_str();
  cmd->add_option("--min-p", a.config.min_p, "drop tokens below min_p x the top probability")->capture_default_str();
  cmd->add_option("--repetition-penalty", a.config.repetition_penalty, "penalty for seen tokens")
      ->capture_default_str();
  cmd->add_option("--seed", a.config.seed, "random seed for sampling")->capture_default_str();
  cmd->add_option("--stop", a.stop, "stop when the generated text contains this string (repeatable)");
}

// EOS ids from generation_config.json (an id or a list), else the tokenizer's EOS token.
std::vector<int32_t> eos_ids(const fs::path& dir, const Tokenizer& t) {
  std::vector<int32_t> ids;
  std::ifstream in(dir / "generation_config.json");
  if (in) {
    try {
      const auto j = nlohmann::json::parse(in);
      if (j.contains("eos_token_id")) {
        const auto& e = j["eos_token_id"];
        if (e.is_number_integer()) ids.push_back(e.get<int32_t>());
        if (e.is_array())
          for (const auto& x : e) ids.push_back(x.get<int32_t>());
      }
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not valid JSON ({})", (dir / "generation_config.json").string(), e.what());
    }
  }
  if (ids.empty() && !t.eos_token().empty())
    if (auto id = t.token_to_id(t.eos_token())) ids.push_back(*id);
  return ids;
}

// Prints the text of `ids` as it grows, holding back an incomplete UTF-8 character.
struct Streamer {
  const Tokenizer& tokenizer;
  std::vector<int32_t> ids;
  size_t printed = 0;
  void push(int32_t id) {
    ids.push_back(id);
    const std::string text = tokenizer.decode(ids, true);
    if (text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0) return;
    if (text.size() > printed) {
      std::fwrite(text.data() + printed, 1, text.size() - printed, stdout);
      std::fflush(stdout);
      printed = text.size();
    }
  }
};

std::vector<int32_t> generate_text(models::DecoderModel& model, const Tokenizer& t,
                                   const std::vector<int32_t>& prompt, const infer::GenerationConfig& c,
                                   const std::vector<std::string>& stop) {
  Streamer s{t, {}, 0};
  auto stop_check = [&](size_t, const std::vector<int32_t>& generated) {
    if (stop.empty()) return false;
    const std::string text = t.decode(generated, true);
    for (const auto& x : stop)
      if (!x.empty() && text.find(x) != std::string::npos) return true;
    return false;
  };
  const auto out = infer::generate(model, {prompt}, c, [&](size_t, int32_t id) {
    if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end()) s.push(id);
  }, stop_check);
  return out[0];
}

int run_generate(GenArgs& a) {
  auto loaded = load_for_inference(a.model, a.adapters, a.active_adapter, a.no_adapter, a.dtype);
  auto& model = loaded.model;
  auto tokenizer = Tokenizer::from_folder(loaded.tokenizer_dir);
  a.config.eos_token_ids = eos_ids(loaded.model_dir, tokenizer);
  const auto prompt = tokenizer.encode(a.prompt, !a.no_special);
  VKF_REQUIRE(!prompt.empty(), "generate: the prompt encodes to no tokens; give some text");
  generate_text(model, tokenizer, prompt, a.config, a.stop);
  std::printf("\n");
  return 0;
}

int run_chat(GenArgs& a) {
  auto loaded = load_for_inference(a.model, a.adapters, a.active_adapter, a.no_adapter, a.dtype);
  auto& model = loaded.model;
  auto tokenizer = Tokenizer::from_folder(loaded.tokenizer_dir);
  VKF_REQUIRE(!tokenizer.chat_template().empty(),
              "{}: no chat_template in tokenizer_config.json or chat_template.jinja; `vkformer "
              "generate` works without one", loaded.tokenizer_dir);
  a.config.eos_token_ids = eos_ids(loaded.model_dir, tokenizer);
  const bool interactive = ::isatty(STDIN_FILENO) != 0;
  nlohmann::json messages = nlohmann::json::array();
  const nlohmann::json extra = {{"bos_token", tokenizer.bos_token()}, {"eos_token", tokenizer.eos_token()}};
  std::string line;
  while (true) {
    if (interactive) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    const std::string text = tokenizer::apply_chat_template(tokenizer.chat_template(), messages, true, extra);
    const auto ids = generate_text(model, tokenizer, tokenizer.encode(text, false), a.config, a.stop);
    std::printf("\n");
    std::fflush(stdout);
    std::vector<int32_t> reply;
    for (int32_t id : ids)
      if (std::find(a.config.eos_token_ids.begin(), a.config.eos_token_ids.end(), id) == a.config.eos_token_ids.end())
        reply.push_back(id);
    messages.push_back({{"role", "assistant"}, {"content", tokenizer.decode(reply, true)}});
  }
  return 0;
}

}  // namespace

void add_generate_commands(CLI::App& app, int& exit_code) {
  static GenArgs gen, chat;
  auto* g = app.add_subcommand("generate", "Generate text from a prompt (streamed to stdout)");
  add_sampling_options(g, gen);
  g->add_option("--prompt", gen.prompt, "the prompt text")->required();
  g->add_flag("--no-special", gen.no_special, "do not add BOS/EOS special tokens to the prompt");
  g->callback([&exit_code] { exit_code = run_generate(gen); });
  auto* c = app.add_subcommand("chat", "Chat with a model using its chat template (stdin lines)");
  add_sampling_options(c, chat);
  c->callback([&exit_code] { exit_code = run_chat(chat); });
}

}  // namespace vkf::cli
