// LoRA options of `vkformer train` (see train_peft.h). Option defaults are peft's LoraConfig
// defaults (r 8, lora_alpha 8, dropout 0, kaiming-uniform A and zero B), and the default targets
// are peft's per-architecture ones, so `--peft lora` alone writes the adapter that
// get_peft_model(model, LoraConfig(task_type="CAUSAL_LM")) would.
#include "cli/train_peft.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "peft/budget.h"
#include "train/checkpoint.h"
#include "vk/error.h"

namespace vkf::cli {
namespace {
namespace fs = std::filesystem;
using nlohmann::ordered_json;

std::vector<std::string> comma_list(const std::string& value, const std::string& option) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= value.size()) {
    const size_t comma = std::min(value.find(',', start), value.size());
    std::string item = value.substr(start, comma - start);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    VKF_REQUIRE(!item.empty(), "{} '{}': an empty item; give names separated by commas", option, value);
    out.push_back(item);
    start = comma + 1;
  }
  return out;
}

// A JSON object option ({"q_proj": 16}) parsed by the adapter_config.json rules for `field`.
peft::LoraConfig pattern_option(const std::string& value, const char* field, const std::string& option) {
  ordered_json j;
  try {
    j = ordered_json::parse(value);
  } catch (const ordered_json::exception& e) {
    fail("{} '{}' is not valid JSON ({}); give an object such as '{{\"q_proj\": 16}}'", option, value, e.what());
  }
  VKF_REQUIRE(j.is_object(), "{} '{}' must be a JSON object of module pattern -> value", option, value);
  return peft::LoraConfig::from_json({{"target_modules", "unused"}, {field, j}}, option);
}

// The LoRA config from --peft-config (or peft's defaults) with the explicit options on top.
peft::LoraConfig config_from_options(const PeftArgs& a, const models::ArchSpec& spec) {
  auto given = [&](const char* name) { return a.options.at(name)->count() > 0; };
  ordered_json base = ordered_json::object();
  if (!a.peft_config.empty()) {
    std::ifstream in(a.peft_config);
    VKF_REQUIRE(in, "--peft-config {}: cannot open the file", a.peft_config);
    try {
      base = ordered_json::parse(in);
    } catch (const ordered_json::exception& e) {
      fail("--peft-config {}: not valid JSON ({})", a.peft_config, e.what());
    }
    VKF_REQUIRE(base.is_object(), "--peft-config {}: an adapter config must be a JSON object", a.peft_config);
  }
  // peft fills a missing target_modules from its per-architecture table; so do we.
  if (!base.contains("target_modules") || base["target_modules"].is_null())
    base["target_modules"] = peft::default_target_modules(spec.model_type);
  peft::LoraConfig c = peft::LoraConfig::from_json(base, a.peft_config.empty() ? "LoRA defaults" : a.peft_config);
  if (given("--lora-r")) {
    VKF_REQUIRE(a.r >= 1, "--lora-r {} must be a positive rank", a.r);
    c.r = a.r;
  }
  if (given("--lora-alpha")) c.lora_alpha = a.alpha;
  if (given("--lora-dropout")) {
    VKF_REQUIRE(a.dropout >= 0 && a.dropout < 1, "--lora-dropout {} must be in [0, 1)", a.dropout);
    c.lora_dropout = a.dropout;
  }
  if (given("--lora-target-modules")) c.set_target_modules(a.target, "--lora-target-modules");
  if (given("--lora-exclude-modules")) c.set_exclude_modules(a.exclude, "--lora-exclude-modules");
  if (given("--lora-layers-to-transform")) {
    c.layers_to_transform.clear();
    for (const auto& item : comma_list(a.layers, "--lora-layers-to-transform")) {
      size_t used = 0;
      int64_t v = -1;
      try {
        v = std::stoll(item, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      VKF_REQUIRE(used == item.size() && v >= 0 && v < spec.num_layers,
                  "--lora-layers-to-transform '{}': '{}' is not a layer index of this model (0..{})", a.layers,
                  item, spec.num_layers - 1);
      c.layers_to_transform.push_back(v);
    }
  }
  if (given("--lora-layers-pattern")) c.layers_pattern = comma_list(a.layers_pattern, "--lora-layers-pattern");
  if (given("--lora-rank-pattern"))
    c.rank_pattern = pattern_option(a.rank_pattern, "rank_pattern", "--lora-rank-pattern").rank_pattern;
  if (given("--lora-alpha-pattern"))
    c.alpha_pattern = pattern_option(a.alpha_pattern, "alpha_pattern", "--lora-alpha-pattern").alpha_pattern;
  if (given("--use-rslora")) c.use_rslora = true;
  if (given("--lora-modules-to-save")) c.modules_to_save = comma_list(a.modules_to_save, "--lora-modules-to-save");
  if (given("--lora-init")) c.init_lora_weights = a.init;
  if (given("--peft-budget")) {
    VKF_REQUIRE(!given("--lora-r"), "give --lora-r or --peft-budget, not both (the budget chooses r)");
    const auto choice = peft::choose_rank_for_budget(spec, c, a.budget);
    c.r = choice.rank;
    std::printf("--peft-budget %g%%: rank %lld (searched 1..%lld) gives %lld trainable parameters, %.4f%% of the "
                "base model's %lld\n", a.budget, static_cast<long long>(choice.rank),
                static_cast<long long>(choice.max_rank), static_cast<long long>(choice.trainable),
                100.0 * static_cast<double>(choice.trainable) / static_cast<double>(choice.base),
                static_cast<long long>(choice.base));
  }
  return c;
}

}  // namespace

void add_peft_options(CLI::App* c, PeftArgs& a) {
  c->add_option("--peft", a.peft, "parameter-efficient fine-tuning method: lora")->check(CLI::IsMember({"lora"}));
  auto add = [&](const char* name, CLI::Option* o) { a.options[name] = o; };
  add("--peft-config", c->add_option("--peft-config", a.peft_config,
                                     "adapter_config.json to take the LoRA config from (the options below override its fields)"));
  add("--lora-r", c->add_option("--lora-r", a.r, "LoRA rank r")->capture_default_str());
  add("--lora-alpha", c->add_option("--lora-alpha", a.alpha, "LoRA alpha (scaling alpha/r)")->capture_default_str());
  add("--lora-dropout", c->add_option("--lora-dropout", a.dropout, "dropout on the LoRA input")->capture_default_str());
  add("--lora-target-modules",
      c->add_option("--lora-target-modules", a.target,
                    "modules to adapt: names separated by commas (q_proj,v_proj; suffix match), all-linear, or a "
                    "regex (any value with other characters; must match the whole module name). Default: "
                    "q_proj,v_proj (phi3: qkv_proj)"));
  add("--lora-exclude-modules", c->add_option("--lora-exclude-modules", a.exclude,
                                              "modules to leave out: names separated by commas, or a regex"));
  add("--lora-layers-to-transform", c->add_option("--lora-layers-to-transform", a.layers,
                                                  "adapt only these layer indices (comma list, e.g. 0,1)"));
  add("--lora-layers-pattern", c->add_option("--lora-layers-pattern", a.layers_pattern,
                                             "name of the layer list for --lora-layers-to-transform (e.g. layers)"));
  add("--lora-rank-pattern", c->add_option("--lora-rank-pattern", a.rank_pattern,
                                           "per-module ranks as JSON, e.g. '{\"q_proj\": 16}' (first match wins)"));
  add("--lora-alpha-pattern", c->add_option("--lora-alpha-pattern", a.alpha_pattern,
                                            "per-module alphas as JSON, e.g. '{\"o_proj\": 32}'"));
  add("--use-rslora", c->add_flag("--use-rslora", a.rslora, "rank-stabilized LoRA: scaling alpha/sqrt(r)"));
  add("--lora-modules-to-save", c->add_option("--lora-modules-to-save", a.modules_to_save,
                                              "modules trained in full and saved with the adapter (comma list, e.g. lm_head)"));
  add("--lora-init", c->add_option("--lora-init", a.init,
                                   "LoRA initialization: true (kaiming-uniform A, zero B), gaussian, false")
                         ->check(CLI::IsMember({"true", "gaussian", "false"})));
  add("--peft-budget", c->add_option("--peft-budget", a.budget,
                                     "choose the largest rank whose trainable parameters stay within this percent of the base model's"));
  c->add_option("--adapter", a.adapter,
                "a peft LoRA adapter folder: with --peft lora, continue training it; without, merge it into the "
                "base weights and fine-tune the merged model");
}

std::shared_ptr<peft::LoraAdapter> setup_peft(const PeftArgs& a, models::DecoderModel& model,
                                              const std::string& model_path, const std::string& resume_dir,
                                              uint64_t seed) {
  const bool resume_lora = !resume_dir.empty() && train::is_adapter_folder(resume_dir);
  const bool lora = a.peft == "lora" || resume_lora;
  std::vector<std::string> given;
  for (const auto& [name, o] : a.options)
    if (o->count() > 0) given.push_back(name);
  if (!lora) {
    VKF_REQUIRE(given.empty(), "{} is a LoRA option; add --peft lora", given.empty() ? "" : given.front());
    if (!a.adapter.empty()) {
      // "Use" an adapter in full fine-tuning: its effect becomes part of the weights trained.
      auto adapter = peft::LoraAdapter::load(model, a.adapter);
      adapter->merge_into(model);
      std::printf("merged the adapter %s into the base weights; fine-tuning the merged model in full (add "
                  "--peft lora to continue training the adapter instead)\n", a.adapter.c_str());
    }
    return nullptr;
  }
  VKF_REQUIRE(!model_path.empty(), "--peft lora needs --model DIR: an adapter is trained on a saved base model "
              "(train the base model from --config first)");
  std::shared_ptr<peft::LoraAdapter> adapter;
  const std::string source = !a.adapter.empty() ? a.adapter : (resume_lora && a.peft.empty()) ? resume_dir : "";
  if (!source.empty()) {
    VKF_REQUIRE(given.empty(), "{}: the adapter's config comes from {}/adapter_config.json; drop {} (or start a "
                "new adapter without --adapter)", given.empty() ? "" : given.front(), source,
                given.empty() ? "" : given.front());
    adapter = peft::LoraAdapter::load(model, source);
    if (source == a.adapter) std::printf("continuing to train the adapter %s\n", source.c_str());
  } else {
    adapter = peft::LoraAdapter::create(model, config_from_options(a, model.spec()), seed);
  }
  adapter->set_base_model_name_or_path(model_path);
  model.add_adapter("default", adapter);
  const auto& c = adapter->config();
  std::set<std::string> kinds;
  for (const auto& m : adapter->modules()) kinds.insert(m.module.substr(m.module.rfind('.') + 1));
  std::string names;
  for (const auto& k : kinds) names += (names.empty() ? "" : ",") + k;
  const int64_t trainable = adapter->trainable_count();
  const int64_t total = peft::base_parameter_count(model.spec()) + trainable;
  std::string saved;
  for (const auto& m : c.modules_to_save) saved += (saved.empty() ? ", trained in full: " : ",") + m;
  std::printf("LoRA: r %lld, lora_alpha %g%s on %zu modules (%s)%s\n", static_cast<long long>(c.r), c.lora_alpha,
              c.use_rslora ? " (rsLoRA)" : "", adapter->modules().size(), names.c_str(), saved.c_str());
  std::printf("trainable params: %lld || all params: %lld || trainable%%: %.4f\n", static_cast<long long>(trainable),
              static_cast<long long>(total), 100.0 * static_cast<double>(trainable) / static_cast<double>(total));
  return adapter;
}

}  // namespace vkf::cli
