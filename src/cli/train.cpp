// `vkformer train`: full fine-tuning of a Hugging Face model folder (--model), or training from
// an architecture config (--config + --tokenizer), on text/JSONL data; writes a Hugging Face folder
// (config.json, model.safetensors, tokenizer files, generation_config.json) that transformers
// loads. Option names follow transformers' TrainingArguments, with dashes. With --peft lora (see
// train_peft.cpp) it trains a LoRA adapter instead and writes a peft adapter folder
// (adapter_config.json, adapter_model.safetensors, tokenizer files). --precision f16 trains in
// mixed precision with dynamic loss scaling (train/optimizer_step.h).
#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "cli/commands.h"
#include "cli/train_peft.h"
#include "cli/data_args.h"
#include "hub/resolve.h"
#include "io/safetensors.h"
#include "models/decoder.h"
#include "models/registry.h"
#include "tokenizer/tokenizer.h"
#include "train/optimizer_step.h"
#include "train/trainer.h"
#include "vk/error.h"

namespace vkf::cli {
namespace {
namespace fs = std::filesystem;

struct TrainArgs {
  std::string model, config, tokenizer, data, eval_data, out;
  double eval_fraction = 0.0;
  int64_t max_length = 512;
  bool no_packing = false;
  std::string max_memory;    // a size, e.g. 2GiB
  std::string precision;     // fp32 | f16; empty: VKF_PRECISION or fp32
  bool estimate_memory = false;
  train::TrainOptions opt;
  PeftArgs peft;
  train::DataOptions data_options;  // --split and the column options
};

// Weights as transformers' _init_weights: normal(0, initializer_range) for matrices and
// embeddings, zero biases, norm weights 1 (0 for the (1+w) form).
models::DecoderModel init_from_config(const std::string& config_path, uint64_t seed) {
  models::ArchSpec spec = models::spec_from_file(config_path);
  const double std_dev = spec.config.value("initializer_range", 0.02);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, std_dev);
  std::map<std::string, Tensor> params;
  for (const auto& [name, shape] : models::DecoderModel::parameter_shapes(spec)) {
    std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
    const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    const bool norm = name.find("norm") != std::string::npos;
    if (bias) std::fill(v.begin(), v.end(), 0.0f);
    else if (norm) std::fill(v.begin(), v.end(), spec.norm_one_plus ? 0.0f : 1.0f);
    else for (auto& x : v) x = static_cast<float>(normal(rng));
    params[name] = Tensor::from_host(std::span<const float>(v), shape);
  }
  return models::DecoderModel(std::move(spec), std::move(params));
}

// Tests only: VKF_TEST_LOSS_SCALING="init_scale=X,growth_interval=N,overflow_at=S1:S2:..." sets
// the loss scaler's configuration and injects inf gradients at the given global steps, so the
// skip/backoff/growth paths run on any device in a few steps.
void apply_test_loss_scaling(train::TrainOptions& o) {
  const char* env = std::getenv("VKF_TEST_LOSS_SCALING");
  if (!env || !*env) return;
  std::stringstream all(env);
  std::string item;
  while (std::getline(all, item, ',')) {
    const size_t eq = item.find('=');
    VKF_REQUIRE(eq != std::string::npos, "VKF_TEST_LOSS_SCALING: '{}' is not key=value", item);
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    try {
      if (key == "init_scale") {
        o.loss_scaling.init_scale = std::stod(value);
      } else if (key == "growth_interval") {
        o.loss_scaling.growth_interval = std::stoll(value);
      } else if (key == "overflow_at") {
        std::stringstream steps(value);
        std::string s;
        while (std::getline(steps, s, ':')) o.inject_overflow_at.insert(std::stoll(s));
      } else {
        fail("VKF_TEST_LOSS_SCALING: unknown key '{}' (init_scale, growth_interval, overflow_at)", key);
      }
    } catch (const std::logic_error&) {
      fail("VKF_TEST_LOSS_SCALING: '{}' is not a number", value);
    }
  }
}

std::atomic<bool> g_stop{false};
extern "C" void on_sigint(int) { g_stop.store(true); }

std::string clock(double seconds) {
  const auto s = static_cast<int64_t>(std::max(0.0, seconds));
  return fmt::format("{}:{:02d}:{:02d}", s / 3600, (s / 60) % 60, s % 60);
}

void copy_if_exists(const fs::path& from, const fs::path& to) {
  if (fs::exists(from)) fs::copy_file(from, to, fs::copy_options::overwrite_existing);
}

int run(TrainArgs& a) {
  VKF_REQUIRE(a.model.empty() != a.config.empty(), "train: give --model DIR, or --config config.json with --tokenizer");
  VKF_REQUIRE(!a.out.empty() || a.estimate_memory, "train: --out DIR is required (the output folder)");
  if (!a.max_memory.empty()) a.opt.max_memory = train::parse_byte_size(a.max_memory, "--max-memory");
  a.opt.precision = a.precision.empty() ? matmul_precision() : train::parse_precision(a.precision, "--precision");
  apply_test_loss_scaling(a.opt);
  a.model = hub::resolve_path(a.model, hub::Need::Model);  // a Hub reference org/name[@rev] -> the cache
  a.tokenizer = hub::resolve_path(a.tokenizer, hub::Need::Tokenizer);
  const fs::path tok_dir = !a.tokenizer.empty() ? fs::path(a.tokenizer) : fs::path(a.model);
  const Tokenizer tokenizer = fs::is_directory(tok_dir) ? Tokenizer::from_folder(tok_dir) : Tokenizer::from_file(tok_dir);
  // The architecture alone (config.json) is enough to plan memory, so a run that cannot fit stops
  // before its weights are read.
  const models::ArchSpec spec =
      models::spec_from_file(a.model.empty() ? a.config : (fs::path(a.model) / "config.json").string());
  VKF_REQUIRE(static_cast<int64_t>(tokenizer.vocab_size()) <= spec.vocab_size,
              "train: the tokenizer has {} tokens but the model's vocab_size is {}", tokenizer.vocab_size(),
              spec.vocab_size);
  // The checkpoint is found now, since a LoRA checkpoint also decides what is trained.
  if (a.opt.resume_from == "auto") {
    a.opt.resume_from = train::latest_checkpoint(a.out);
    VKF_REQUIRE(!a.opt.resume_from.empty(), "--resume-from-checkpoint auto: no checkpoint in {}", a.out);
  }

  train::DataOptions d = a.data_options;
  d.max_length = a.max_length;
  d.packing = !a.no_packing;
  if (auto eos = tokenizer.token_to_id(tokenizer.eos_token()); eos && !tokenizer.eos_token().empty()) d.eos_id = *eos;
  auto sequences = train::make_sequences(train::load_documents(a.data, tokenizer, d), d);
  std::vector<train::Example> eval;
  if (!a.eval_data.empty()) {
    eval = train::make_sequences(train::load_documents(a.eval_data, tokenizer, d), d);
  } else if (a.eval_fraction > 0) {
    VKF_REQUIRE(a.eval_fraction < 1, "--eval-fraction must be in (0, 1)");
    std::mt19937_64 rng(a.opt.seed ^ 0x5eedull);
    std::shuffle(sequences.begin(), sequences.end(), rng);
    const size_t n = std::max<size_t>(1, static_cast<size_t>(std::ceil(a.eval_fraction * static_cast<double>(sequences.size()))));
    VKF_REQUIRE(n < sequences.size(), "--eval-fraction leaves no training sequences ({} in all)", sequences.size());
    eval.assign(sequences.end() - static_cast<std::ptrdiff_t>(n), sequences.end());
    sequences.resize(sequences.size() - n);
  }
  VKF_REQUIRE(a.opt.batch_size > 0 && a.opt.grad_accum > 0,
              "train: --per-device-train-batch-size and --gradient-accumulation-steps must be positive");
  const train::MemoryCapacity capacity = train::usable_capacity(a.opt.max_memory);
  auto print_plan = [&](const train::MemoryPlan& plan) {
    std::printf("%s", plan.table().c_str());
    std::printf("usable: %s; %s\n", capacity.description.c_str(),
                plan.device_bytes() <= capacity.usable ? "the run fits" : "the run does NOT fit");
  };
  // Full training is planned from config.json before any weight is read. A LoRA run trains only
  // its adapter, whose size is known once the adapter is set up on the loaded model.
  const bool lora = !a.peft.peft.empty() ||
                    (!a.opt.resume_from.empty() && train::is_adapter_folder(a.opt.resume_from));
  if (!lora) {
    const train::MemoryPlan plan = train::plan_training_memory(spec, sequences, a.opt);
    if (a.estimate_memory) {
      print_plan(plan);
      return 0;
    }
    train::require_fits(spec, plan, capacity);
  }
  models::DecoderModel model = a.model.empty() ? init_from_config(a.config, a.opt.seed) : models::DecoderModel::load(a.model);
  a.opt.adapter = setup_peft(a.peft, model, a.model, a.opt.resume_from, a.opt.seed);
  if (a.estimate_memory) {  // LoRA
    print_plan(train::plan_training_memory(spec, sequences, a.opt));
    return 0;
  }

  a.opt.output_dir = a.out;
  std::printf("training on %zu sequences of up to %lld tokens (%s), evaluating on %zu\n", sequences.size(),
              static_cast<long long>(a.max_length), d.packing ? "packed" : "padded", eval.size());
  // Ctrl-C: finish the step, write a checkpoint, stop. A terminal gets a live progress line; a
  // pipe gets the plain log lines only.
  std::signal(SIGINT, on_sigint);
  a.opt.stop = &g_stop;
  const bool tty = ::isatty(STDOUT_FILENO) != 0;
  if (tty) {
    a.opt.on_progress = [](const train::Progress& p) {
      const int width = 24;
      const int filled = static_cast<int>(width * p.step / std::max<int64_t>(1, p.total));
      std::printf("\r\033[K[%s%s] %lld/%lld  loss %.4f  lr %.2e  %.0f tok/s  ETA %s",
                  std::string(static_cast<size_t>(filled), '#').c_str(),
                  std::string(static_cast<size_t>(width - filled), '.').c_str(),
                  static_cast<long long>(p.step), static_cast<long long>(p.total), p.loss, p.lr,
                  p.tokens_per_s, clock(p.eta_s).c_str());
      std::fflush(stdout);
    };
  }
  const auto result = train::train(model, sequences, eval, a.opt, [tty](const std::string& line) {
    std::printf("%s%s\n", tty ? "\r\033[K" : "", line.c_str());
    std::fflush(stdout);
  });
  std::signal(SIGINT, SIG_DFL);
  if (result.interrupted) {
    std::printf("stopped by Ctrl-C; continue with --resume-from-checkpoint auto --out %s\n", a.out.c_str());
    return 130;
  }
  fs::create_directories(a.out);
  // A LoRA run writes the adapter only (the base model is --model, unchanged), as peft's
  // save_pretrained does; full training writes the whole model.
  if (a.opt.adapter) a.opt.adapter->save(a.out);
  else model.save(a.out);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"})
    if (fs::is_directory(tok_dir)) copy_if_exists(tok_dir / f, fs::path(a.out) / f);
  if (!fs::is_directory(tok_dir)) copy_if_exists(tok_dir, fs::path(a.out) / "tokenizer.json");
  if (a.opt.adapter) {
    // peft's adapter folders carry no generation_config.json: generation settings are the base model's.
  } else if (!a.model.empty() && fs::exists(fs::path(a.model) / "generation_config.json")) {
    copy_if_exists(fs::path(a.model) / "generation_config.json", fs::path(a.out) / "generation_config.json");
  } else {
    nlohmann::json g = {{"_from_model_config", true}};
    if (d.eos_id >= 0) g["eos_token_id"] = d.eos_id;
    if (auto bos = tokenizer.token_to_id(tokenizer.bos_token()); bos && !tokenizer.bos_token().empty()) g["bos_token_id"] = *bos;
    const std::string text = g.dump(2) + "\n";
    io::write_file_atomic((fs::path(a.out) / "generation_config.json").string(),
                          {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  }
  std::printf("saved %s to %s\n", a.opt.adapter ? "the LoRA adapter" : "the model", a.out.c_str());
  return 0;
}

}  // namespace

void add_train_command(CLI::App& app, int& exit_code) {
  static TrainArgs a;
  auto* c = app.add_subcommand("train", "Fine-tune (or train from a config) a decoder model");
  c->add_option("--model", a.model, "Hugging Face model folder to fine-tune");
  c->add_option("--config", a.config, "config.json to train from scratch (with --tokenizer)");
  c->add_option("--tokenizer", a.tokenizer, "tokenizer folder or tokenizer.json (default: --model)");
  c->add_option("--data", a.data, "training data: .txt, .jsonl, .json, .csv, .parquet (text | prompt+completion | "
                "messages), a folder, or a Hub dataset org/name[@rev]")->required();
  add_data_options(c, a.data_options);
  c->add_option("--eval-data", a.eval_data, "evaluation data (same formats)");
  c->add_option("--eval-fraction", a.eval_fraction, "hold out this fraction of the sequences for evaluation");
  c->add_option("--out", a.out, "output folder (Hugging Face format); not needed with --estimate-memory");
  c->add_option("--max-length", a.max_length, "sequence length")->capture_default_str();
  c->add_flag("--no-packing", a.no_packing, "one (truncated, padded) example per sequence instead of packing");
  c->add_option("--learning-rate", a.opt.schedule.learning_rate, "peak learning rate")->capture_default_str();
  c->add_option("--lr-scheduler-type", a.opt.schedule.type, "constant, constant_with_warmup, linear, cosine, cosine_with_min_lr")->capture_default_str();
  c->add_option("--warmup-steps", a.opt.schedule.warmup_steps, "warmup steps")->capture_default_str();
  c->add_option("--warmup-ratio", a.opt.schedule.warmup_ratio, "warmup as a fraction of the steps")->capture_default_str();
  c->add_option("--max-steps", a.opt.max_steps, "optimizer steps (overrides epochs)")->capture_default_str();
  c->add_option("--num-train-epochs", a.opt.num_train_epochs, "epochs")->capture_default_str();
  c->add_option("--per-device-train-batch-size,--batch-size", a.opt.batch_size, "sequences per micro-batch")->capture_default_str();
  c->add_option("--gradient-accumulation-steps", a.opt.grad_accum, "micro-batches per optimizer step")->capture_default_str();
  c->add_option("--weight-decay", a.opt.weight_decay, "AdamW weight decay (not on biases and norms)")->capture_default_str();
  c->add_option("--adam-beta1", a.opt.beta1, "AdamW beta1")->capture_default_str();
  c->add_option("--adam-beta2", a.opt.beta2, "AdamW beta2")->capture_default_str();
  c->add_option("--adam-epsilon", a.opt.eps, "AdamW epsilon")->capture_default_str();
  c->add_option("--max-grad-norm", a.opt.max_grad_norm, "gradient clipping (<= 0: off)")->capture_default_str();
  c->add_option("--precision", a.precision,
                "fp32 (default; or VKF_PRECISION) or f16: mixed precision, f16 matrix products with fp32 "
                "accumulation, f32 weights and optimizer state, dynamic loss scaling (as --fp16 in transformers)");
  c->add_option("--logging-steps", a.opt.logging_steps, "log every N steps")->capture_default_str();
  c->add_option("--eval-steps", a.opt.eval_steps, "evaluate every N steps (and at the end)")->capture_default_str();
  c->add_option("--seed", a.opt.seed, "seed of shuffling, initialization and dropout masks")->capture_default_str();
  c->add_flag("--gradient-checkpointing", a.opt.gradient_checkpointing,
              "recompute each layer's activations in the backward pass (less memory, about one more forward of compute)");
  c->add_flag("!--eager-steps", a.opt.replay_steps,
              "record every step anew instead of replaying one recording of it (steps replay by "
              "default once their "
              "shapes repeat: the same arithmetic without per-step host work)");
  c->add_option("--save-steps", a.opt.save_steps, "write a checkpoint every N steps and at the end (0: none)")->capture_default_str();
  c->add_option("--save-total-limit", a.opt.save_total_limit, "keep only the newest N checkpoints (0: all)")->capture_default_str();
  c->add_option("--resume-from-checkpoint", a.opt.resume_from, "a checkpoint folder, or auto (the newest in --out)");
  add_peft_options(c, a.peft);
  c->add_option("--max-memory", a.max_memory, "device memory the run may use, e.g. 2GiB or 500MB (default: what the device has); a run planned to need more stops before it starts");
  c->add_flag("--estimate-memory", a.estimate_memory, "print the memory plan (parameters, gradients, optimizer state, activations, workspace) and exit");
  c->callback([&exit_code] { exit_code = run(a); });
}

}  // namespace vkf::cli
