// `vkformer parity`: the PARITY.md run (forward, loss, gradients, AdamW steps) on a model folder
// and a batch, written under the fixture names; with --fixture it also compares every result with
// transformers' fp32 and fp64 results and prints both error figures per tensor group.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "cli/commands.h"
#include "core/launch.h"
#include "hub/resolve.h"
#include "models/decoder.h"
#include "peft/lora.h"
#include "train/parity.h"
#include "vk/error.h"

namespace vkf::cli {
namespace {
namespace fs = std::filesystem;

struct ParityArgs {
  std::string model, batch, out, fixture, save, adapter;
  int steps = 2;
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

// Prints one line per group (worst tensor of the group) and returns whether all passed.
bool report(const std::string& title, const std::vector<train::ParityRow>& rows) {
  std::map<std::string, train::ParityRow> worst;
  std::vector<std::string> order;
  bool all = true;
  for (const auto& r : rows) {
    all = all && r.pass;
    auto it = worst.find(r.group);
    if (it == worst.end()) {
      order.push_back(r.group);
      worst[r.group] = r;
    } else if (!r.pass || (it->second.pass && r.err64 / r.tolerance > it->second.err64 / it->second.tolerance)) {
      if (it->second.pass || !r.pass) it->second = r;
    }
  }
  fmt::print("{}\n  {:<8} {:>12} {:>12} {:>12} {:>12}  {}\n", title, "group", "|ours-fp64|",
             "|ours-fp32|", "|hf32-fp64|", "tolerance", "result (worst tensor)");
  for (const auto& g : order) {
    const auto& r = worst[g];
    fmt::print("  {:<8} {:>12.3e} {:>12.3e} {:>12.3e} {:>12.3e}  {} ({})\n", g, r.err64, r.err32,
               r.ref32, r.tolerance, r.pass ? "pass" : "FAIL", r.name);
  }
  for (const auto& r : rows) {
    if (!r.pass) {
      fmt::print("  FAIL {}: |ours-fp64| {:.3e} > tolerance {:.3e}\n", r.name, r.err64, r.tolerance);
    }
  }
  return all;
}

int run(const ParityArgs& a) {
  // Parity is about accuracy: double-precision transcendental functions and accumulators where
  // the device has fp64 (see core/launch.h).
  set_math_mode(MathMode::Precise);
  // The contract is fp32 end to end: matrix products stay fp32 whatever VKF_PRECISION says.
  set_matmul_precision(MatmulPrecision::F32);
  if (a.fixture.empty()) {
    VKF_REQUIRE(!a.model.empty() && !a.batch.empty() && !a.out.empty(),
                "parity needs --model DIR --batch FILE --out FILE (or --fixture DIR)");
    train::ParityOptions opt;
    opt.steps = a.steps;
    opt.adamw = {a.lr, a.beta1, a.beta2, a.eps, a.weight_decay};
    auto model = models::DecoderModel::load(hub::resolve_path(a.model, hub::Need::Model));
    std::shared_ptr<peft::LoraAdapter> adapter;
    if (!a.adapter.empty()) {
      adapter = peft::LoraAdapter::load(model, hub::resolve_path(a.adapter, hub::Need::Adapter));
      model.add_adapter("default", adapter);
    }
    const auto batch = train::load_parity_batch(a.batch);
    io::write_safetensors(a.out, train::run_parity(model, batch, opt, adapter.get()));
    fmt::print("wrote {}\n", a.out);
    if (!a.save.empty()) {
      if (adapter) adapter->save(a.save);
      else model.save(a.save);
      fmt::print("saved the model after {} step(s) to {}\n", opt.steps, a.save);
    }
    return 0;
  }
  // Fixture mode: every AdamW set of adamw.json, compared with expected_<set>_fp32/fp64.
  const fs::path dir(a.fixture);
  const std::string sets_path = (dir / "adamw.json").string();
  std::ifstream in(sets_path);
  VKF_REQUIRE(in, "{}: cannot open; a parity fixture folder holds adamw.json (see PARITY.md)", sets_path);
  nlohmann::json sets;
  try {
    sets = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON ({})", sets_path, e.what());
  }
  const auto batch = train::load_parity_batch((dir / "batch.safetensors").string());
  const fs::path out_dir = a.out.empty() ? fs::temp_directory_path() : fs::path(a.out);
  fs::create_directories(out_dir);
  bool all = true;
  for (auto& [set, p] : sets.items()) {
    if (!p.is_object()) continue;  // e.g. a "steps" entry
    train::ParityOptions opt;
    opt.steps = a.steps;
    auto num = [&](const char* k, double fallback) {
      return p.contains(k) && p[k].is_number() ? p[k].get<double>() : fallback;
    };
    opt.adamw = {num("lr", 1e-3), num("beta1", 0.9), num("beta2", 0.999), num("eps", 1e-8),
                 num("weight_decay", 0.0)};
    auto model = models::DecoderModel::load(dir.string());
    // A LoRA case carries its adapter in <fixture>/adapter (or --adapter names one).
    std::shared_ptr<peft::LoraAdapter> adapter;
    const std::string adapter_dir = !a.adapter.empty() ? a.adapter
                                    : fs::is_directory(dir / "adapter") ? (dir / "adapter").string() : "";
    if (!adapter_dir.empty()) {
      adapter = peft::LoraAdapter::load(model, adapter_dir);
      model.add_adapter("default", adapter);
    }
    const std::string out = (out_dir / fmt::format("vkformer_{}_{}.safetensors",
                                                   dir.filename().string(), set)).string();
    io::write_safetensors(out, train::run_parity(model, batch, opt, adapter.get()));
    io::SafetensorsFile ours(out), x32((dir / fmt::format("expected_{}_fp32.safetensors", set)).string()),
        x64((dir / fmt::format("expected_{}_fp64.safetensors", set)).string());
    const auto rows = train::compare_parity(ours, x32, x64, batch.mask_host);
    all = report(fmt::format("{} / {} (lr {}, eps {}, weight_decay {}):", dir.filename().string(), set,
                             opt.adamw.lr, opt.adamw.eps, opt.adamw.weight_decay),
                 rows) && all;
  }
  fmt::print("{}\n", all ? "parity: pass" : "parity: FAIL");
  return all ? 0 : 1;
}

}  // namespace

void add_parity_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("parity", "Run the PARITY.md procedure (forward, gradients, AdamW steps)");
  static ParityArgs args;
  cmd->add_option("--model", args.model, "Hugging Face model folder");
  cmd->add_option("--batch", args.batch, "batch.safetensors (input_ids, attention_mask, labels)");
  cmd->add_option("--out", args.out, "output .safetensors (with --fixture: a folder for the outputs)");
  cmd->add_option("--fixture", args.fixture, "a parity fixture folder: run every AdamW set and compare");
  cmd->add_option("--save", args.save, "also write the trained model (or adapter) as a Hugging Face folder");
  cmd->add_option("--adapter", args.adapter, "a peft LoRA adapter folder: train only the adapter (PARITY.md)");
  cmd->add_option("--steps", args.steps, "optimizer steps")->capture_default_str();
  cmd->add_option("--lr", args.lr, "AdamW learning rate")->capture_default_str();
  cmd->add_option("--beta1", args.beta1, "AdamW beta1")->capture_default_str();
  cmd->add_option("--beta2", args.beta2, "AdamW beta2")->capture_default_str();
  cmd->add_option("--eps", args.eps, "AdamW epsilon")->capture_default_str();
  cmd->add_option("--weight-decay", args.weight_decay, "AdamW weight decay")->capture_default_str();
  cmd->callback([&exit_code] { exit_code = run(args); });
}

}  // namespace vkf::cli
