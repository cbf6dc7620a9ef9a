// The PEFT options of `vkformer train` (--peft lora, --lora-*, --peft-config, --adapter,
// --peft-budget) and how they turn into the LoRA adapter a run trains. Kept apart from train.cpp
// so that the full fine-tuning command stays readable; the rules themselves (matching, budget
// search, files) live in src/peft.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "models/decoder.h"
#include "peft/lora.h"

namespace vkf::cli {

struct PeftArgs {
  std::string peft, peft_config, adapter;
  std::string target, exclude, layers, layers_pattern, rank_pattern, alpha_pattern, modules_to_save, init;
  int64_t r = 8;
  double alpha = 8, dropout = 0, budget = 0;
  bool rslora = false;
  std::map<std::string, CLI::Option*> options;  // the LoRA-shaping options, to tell which were given
};

void add_peft_options(CLI::App* cmd, PeftArgs& a);

// Sets up what the options ask for on `model` (loaded from `model_path`; "" when training from a
// config): returns the LoRA adapter to train (added to the model and active), or null for full
// fine-tuning, where --adapter alone merges that adapter into the base weights first.
// `resume_dir` is the resolved checkpoint folder ("" when not resuming): resuming a LoRA
// checkpoint without --peft takes the adapter config from it.
std::shared_ptr<peft::LoraAdapter> setup_peft(const PeftArgs& a, models::DecoderModel& model,
                                              const std::string& model_path, const std::string& resume_dir,
                                              uint64_t seed);

}  // namespace vkf::cli
