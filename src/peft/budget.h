// --peft-budget: the LoRA rank that fits a parameter budget. The budget is a percentage of the
// base model's parameter count (tied matrices counted once, as transformers' num_parameters());
// the search varies the config's default rank `r` only: modules whose rank comes from
// rank_pattern and modules_to_save copies are a fixed cost at every r.
#pragma once

#include <cstdint>

#include "models/arch_spec.h"
#include "peft/lora_config.h"

namespace vkf::peft {

struct BudgetChoice {
  int64_t rank = 0;       // the chosen default r
  int64_t trainable = 0;  // trainable parameters at that rank (count_trainable)
  int64_t base = 0;       // the base model's parameters
  int64_t max_rank = 0;   // the top of the search range
};

int64_t base_parameter_count(const models::ArchSpec& spec);

// The largest r in 1..max_rank whose trainable count is at most percent% of the base model's
// parameters. max_rank is the smallest min(in, out) among the modules that take the default r: a
// higher rank adds parameters there but cannot raise the rank of the update B·A. Fails, naming
// the count at rank 1 and the budget, when even rank 1 does not fit.
BudgetChoice choose_rank_for_budget(const models::ArchSpec& spec, const LoraConfig& config, double percent);

}  // namespace vkf::peft
