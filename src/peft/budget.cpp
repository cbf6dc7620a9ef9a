// The rank search of --peft-budget (see budget.h).
#include "peft/budget.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "models/decoder.h"
#include "peft/lora.h"
#include "vk/error.h"

namespace vkf::peft {

int64_t base_parameter_count(const models::ArchSpec& spec) {
  int64_t n = 0;
  for (const auto& [name, shape] : models::DecoderModel::parameter_shapes(spec)) n += shape_numel(shape);
  return n;
}

BudgetChoice choose_rank_for_budget(const models::ArchSpec& spec, const LoraConfig& config, double percent) {
  VKF_REQUIRE(percent > 0 && percent <= 100, "--peft-budget {} is not a percentage in (0, 100]", percent);
  BudgetChoice c;
  c.base = base_parameter_count(spec);
  // Budgets are compared in integers: count <= base * percent / 100, with the product in double
  // (exact for any real model size) and floored.
  const auto budget = static_cast<int64_t>(static_cast<double>(c.base) * percent / 100.0);
  c.max_rank = std::numeric_limits<int64_t>::max();
  for (const auto& m : model_modules(spec))
    if (is_lora_target(config, m) && !config.rank_from_pattern(m.name))
      c.max_rank = std::min(c.max_rank, std::min(m.in, m.out));
  VKF_REQUIRE(c.max_rank != std::numeric_limits<int64_t>::max(),
              "--peft-budget: no targeted module takes the default rank (every one has a rank_pattern entry "
              "or nothing is targeted), so there is no rank to choose; drop --peft-budget or the rank_pattern");
  auto count_at = [&](int64_t r) {
    LoraConfig at = config;
    at.r = r;
    return count_trainable(spec, at);
  };
  const int64_t at_one = count_at(1);
  const double share = 100.0 * static_cast<double>(at_one) / static_cast<double>(c.base);
  VKF_REQUIRE(at_one <= budget,
              "--peft-budget {}%: even rank 1 needs {} trainable parameters ({:.4f}% of the base model's {}), "
              "over the budget of {}; raise --peft-budget to at least {:.4f} or target fewer modules",
              percent, at_one, share, c.base, budget, std::ceil(share * 1e4) / 1e4);
  // The count grows with r (each default-rank module adds r·(in + out)): binary search.
  int64_t lo = 1, hi = c.max_rank;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (count_at(mid) <= budget) lo = mid;
    else hi = mid - 1;
  }
  c.rank = lo;
  c.trainable = count_at(lo);
  return c;
}

}  // namespace vkf::peft
