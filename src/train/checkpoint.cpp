// Checkpoint writing, rotation and loading (see checkpoint.h).
#include "train/checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "io/safetensors.h"
#include "vk/error.h"

namespace vkf::train {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

int64_t step_of(const fs::path& p) {
  const std::string n = p.filename().string();
  if (n.rfind("checkpoint-", 0) != 0) return -1;
  try {
    return std::stoll(n.substr(11));
  } catch (...) {
    return -1;
  }
}

// Fault injection for the kill test: a pause between the files of a checkpoint.
void test_pause() {
  if (const char* ms = std::getenv("VKF_CHECKPOINT_PAUSE_MS"); ms && *ms)
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoll(ms)));
}

void write_text(const fs::path& p, const std::string& text) {
  io::write_file_atomic(p.string(), {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

// The trained tensors' names, in the optimizer's order.
std::vector<std::string> trained_names(const models::DecoderModel& model, const peft::LoraAdapter* adapter) {
  if (!adapter) return model.parameter_names();
  std::vector<std::string> names;
  for (const auto& [n, t] : adapter->parameters()) names.push_back(n);
  return names;
}

// The first adapter_config.json field in which two configs differ ("" when none). Where the base
// model came from does not matter: the run's --model is checked by the parameter shapes.
std::string config_difference(const peft::LoraConfig& a, const peft::LoraConfig& b) {
  json ja = a.to_json(), jb = b.to_json();  // unordered: key order is not a difference
  ja.erase("base_model_name_or_path");
  jb.erase("base_model_name_or_path");
  for (const auto& [k, v] : ja.items())
    if (!jb.contains(k) || jb[k] != v) return k;
  for (const auto& [k, v] : jb.items())
    if (!ja.contains(k)) return k;
  return "";
}

// Copies a LoRA checkpoint's adapter tensors into the run's adapter (in place, so the optimizer,
// which holds the same tensors, sees them).
void load_adapter_weights(const std::string& dir, models::DecoderModel& model, peft::LoraAdapter& adapter) {
  VKF_REQUIRE(is_adapter_folder(dir), "{}: a full fine-tuning checkpoint (no adapter_config.json); it cannot "
              "resume a LoRA run (resume it without --peft/--adapter)", dir);
  const auto saved = peft::LoraAdapter::load(model, dir);
  const std::string diff = config_difference(saved->config(), adapter.config());
  VKF_REQUIRE(diff.empty(), "{}: the checkpoint's adapter_config.json has a different '{}' than this run's "
              "LoRA options; resume with the same options (or leave out --peft and the LoRA options to take "
              "them from the checkpoint)", dir, diff);
  const auto& want = adapter.parameters();
  const auto& have = saved->parameters();
  VKF_REQUIRE(want.size() == have.size(), "{}: the checkpoint's adapter has {} tensors, this run's {}", dir,
              have.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    VKF_REQUIRE(want[i].first == have[i].first && want[i].second.shape() == have[i].second.shape(),
                "{}: adapter tensor '{}' does not match this run's '{}'", dir, have[i].first, want[i].first);
    want[i].second.copy_(have[i].second);
  }
}

// JSON has no inf or NaN: nlohmann writes them as null (the grad_norm of a step skipped for
// inf/nan gradients), and null reads back as NaN.
double number_or_nan(const json& v) {
  return v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>();
}

}  // namespace

bool is_adapter_folder(const std::string& dir) { return fs::exists(fs::path(dir) / "adapter_config.json"); }

std::string save_checkpoint(const std::string& root, const models::DecoderModel& model, ops::AdamW& opt,
                            const TrainerState& s, int64_t keep, const peft::LoraAdapter* adapter) {
  fs::create_directories(root);
  const fs::path final_dir = fs::path(root) / fmt::format("checkpoint-{}", s.step);
  const fs::path tmp = fs::path(root) / fmt::format(".checkpoint-{}.tmp-{}", s.step, ::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  if (adapter) adapter->save(tmp.string());
  else model.save(tmp.string());
  test_pause();
  std::vector<io::WriteTensor> state;
  const auto names = trained_names(model, adapter);
  for (size_t i = 0; i < names.size(); ++i) {
    state.push_back(io::to_write_tensor("exp_avg." + names[i], opt.exp_avg()[i]));
    state.push_back(io::to_write_tensor("exp_avg_sq." + names[i], opt.exp_avg_sq()[i]));
  }
  io::write_safetensors((tmp / "optimizer.safetensors").string(), state);
  test_pause();
  json log = json::array();
  for (const auto& l : s.log) {
    json e = {{"step", l.step}, {"loss", l.loss}, {"lr", l.lr}, {"grad_norm", l.grad_norm}};
    if (l.loss_scale > 0) e.update({{"loss_scale", l.loss_scale}, {"skipped", l.skipped}});
    log.push_back(std::move(e));
  }
  json j = {{"step", s.step},           {"optimizer_steps", opt.step_count()},
            {"param_steps", opt.param_steps()}, {"lr", opt.lr()},
            {"order", s.order},         {"cursor", s.cursor},
            {"rng", s.rng},             {"dropout_seed", s.dropout_seed},
            {"dropout_offset", s.dropout_offset}, {"log_history", log},
            {"precision", s.precision}};
  if (s.grad_scaler) j.update({{"grad_scaler", s.grad_scaler->to_json()}, {"skipped_steps", s.skipped_steps}});
  write_text(tmp / "trainer_state.json", j.dump(1) + "\n");
  // The rename is the commit point: before it the old checkpoint is the newest complete one.
  if (fs::exists(final_dir)) fs::remove_all(final_dir);
  fs::rename(tmp, final_dir);
  if (keep > 0) {
    std::vector<std::pair<int64_t, fs::path>> all;
    for (const auto& e : fs::directory_iterator(root))
      if (e.is_directory() && step_of(e.path()) >= 0) all.push_back({step_of(e.path()), e.path()});
    std::sort(all.begin(), all.end());
    for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) fs::remove_all(all[i].second);
  }
  return final_dir.string();
}

std::string latest_checkpoint(const std::string& root) {
  if (!fs::is_directory(root)) return "";
  int64_t best = -1;
  fs::path path;
  for (const auto& e : fs::directory_iterator(root)) {
    const int64_t s = step_of(e.path());
    if (e.is_directory() && s > best && fs::exists(e.path() / "trainer_state.json")) {
      best = s;
      path = e.path();
    }
  }
  return best < 0 ? "" : path.string();
}

TrainerState load_checkpoint(const std::string& dir, models::DecoderModel& model, ops::AdamW& opt,
                             peft::LoraAdapter* adapter) {
  const fs::path d(dir);
  const fs::path state_file = d / "trainer_state.json";
  std::ifstream in(state_file);
  VKF_REQUIRE(in, "{}: not a checkpoint (no trainer_state.json)", dir);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({})", state_file.string(), e.what());
  }
  const auto names = trained_names(model, adapter);
  if (adapter) {
    load_adapter_weights(dir, model, *adapter);
  } else {
    VKF_REQUIRE(!is_adapter_folder(dir), "{}: a LoRA checkpoint (it holds adapter_config.json); resume it with "
                "the LoRA run's options, or with no --peft option at all to take them from the checkpoint", dir);
    const auto loaded = models::DecoderModel::load(dir);
    VKF_REQUIRE(loaded.parameter_names() == names, "{}: the checkpoint's parameters differ from the model's", dir);
    for (const auto& n : names) model.param(n).copy_(loaded.param(n));
  }
  io::SafetensorsFile optf((d / "optimizer.safetensors").string());
  VKF_REQUIRE(opt.exp_avg().size() == names.size(), "internal: the optimizer has {} tensors, the run trains {}",
              opt.exp_avg().size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    opt.exp_avg()[i].copy_(optf.load("exp_avg." + names[i]));
    opt.exp_avg_sq()[i].copy_(optf.load("exp_avg_sq." + names[i]));
  }
  opt.param_steps() = j.at("param_steps").get<std::vector<int64_t>>();
  opt.set_step_count(j.at("optimizer_steps").get<int64_t>());
  opt.set_lr(j.at("lr").get<double>());
  TrainerState s;
  s.step = j.at("step").get<int64_t>();
  s.order = j.at("order").get<std::vector<uint64_t>>();
  s.cursor = j.at("cursor").get<uint64_t>();
  s.rng = j.at("rng").get<std::string>();
  s.has_dropout_stream = j.contains("dropout_offset");
  if (s.has_dropout_stream) {
    s.dropout_seed = j.at("dropout_seed").get<uint64_t>();
    s.dropout_offset = j.at("dropout_offset").get<uint64_t>();
  }
  for (const auto& l : j.at("log_history")) {
    StepLog e{l.at("step").get<int64_t>(), number_or_nan(l.at("loss")), l.at("lr").get<double>(),
              number_or_nan(l.at("grad_norm"))};
    e.loss_scale = l.value("loss_scale", 0.0);
    e.skipped = l.value("skipped", false);
    s.log.push_back(e);
  }
  s.precision = j.value("precision", std::string("fp32"));
  VKF_REQUIRE(s.precision == "fp32" || s.precision == "f16", "{}: precision '{}' is neither fp32 nor f16",
              state_file.string(), s.precision);
  if (s.precision == "f16") {
    VKF_REQUIRE(j.contains("grad_scaler") && j.contains("skipped_steps"),
                "{}: an f16 checkpoint without grad_scaler and skipped_steps", state_file.string());
    s.grad_scaler = GradScaler::from_json(j.at("grad_scaler"), state_file.string());
    s.skipped_steps = j.at("skipped_steps").get<int64_t>();
  }
  return s;
}

}  // namespace vkf::train
