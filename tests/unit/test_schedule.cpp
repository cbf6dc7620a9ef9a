// Learning-rate schedules against transformers' own schedulers (tests/fixtures/schedule, from
// tools/oracle/schedule_fixture.py) and against values worked out by hand from its lambdas
// (optimization.py): LambdaLR multiplies the base rate by lambda(k) at scheduler step k, and the
// k-th optimizer step (1-based) uses lambda(k - 1).
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <numbers>

#include "test_util.h"
#include "train/schedule.h"
#include "vk/error.h"

namespace vkf {
namespace {

using train::LrSchedule;
using train::ScheduleConfig;

TEST(Schedule, LinearWithWarmup) {
  LrSchedule s({.type = "linear", .learning_rate = 1e-3, .total_steps = 10, .warmup_steps = 4});
  // lambda(k) = k/4 for k < 4, then (10 - k)/6.
  const double want[] = {0.0, 0.25e-3, 0.5e-3, 0.75e-3, 1e-3, 5e-3 / 6, 4e-3 / 6, 3e-3 / 6, 2e-3 / 6, 1e-3 / 6};
  for (int k = 1; k <= 10; ++k) EXPECT_NEAR(s.lr_at(k), want[k - 1], 1e-15) << k;
  EXPECT_EQ(s.lr_at(11), 0.0);  // never negative past the end
}

TEST(Schedule, CosineAndMinLr) {
  LrSchedule c({.type = "cosine", .learning_rate = 2.0, .total_steps = 9, .warmup_steps = 1});
  EXPECT_EQ(c.lr_at(1), 0.0);
  EXPECT_NEAR(c.lr_at(2), 2.0, 1e-15);                                     // progress 0
  EXPECT_NEAR(c.lr_at(6), 1.0, 1e-12);                                     // progress 1/2: cos(pi/2)
  EXPECT_NEAR(c.lr_at(4), 1.0 + std::cos(std::numbers::pi / 4), 1e-12);    // progress 1/4
  LrSchedule m({.type = "cosine_with_min_lr", .learning_rate = 2.0, .total_steps = 9,
                .warmup_steps = 1, .min_lr = 0.5});
  EXPECT_NEAR(m.lr_at(6), 2.0 * (0.5 * 0.75 + 0.25), 1e-12);  // factor 0.5 scaled into [0.25, 1]
  EXPECT_NEAR(m.lr_at(10), 0.5, 1e-12);                       // ends at min_lr
}

TEST(Schedule, ConstantsAndWarmupRatio) {
  LrSchedule k({.type = "constant", .learning_rate = 3.0});
  EXPECT_EQ(k.lr_at(1), 3.0);
  EXPECT_EQ(k.lr_at(1000), 3.0);
  LrSchedule w({.type = "constant_with_warmup", .learning_rate = 3.0, .warmup_steps = 3});
  EXPECT_NEAR(w.lr_at(2), 1.0, 1e-15);
  EXPECT_EQ(w.lr_at(4), 3.0);
  // warmup_ratio 0.1 of 25 steps: ceil(2.5) = 3 warmup steps.
  LrSchedule r({.type = "linear", .learning_rate = 1.0, .total_steps = 25, .warmup_ratio = 0.1});
  EXPECT_EQ(r.warmup_steps(), 3);
  EXPECT_NEAR(r.lr_at(3), 2.0 / 3.0, 1e-15);
}

// Every learning rate transformers' get_scheduler gives at optimizer steps 1..N for the cases of
// tools/oracle/schedule_fixture.py (warmup ratios resolved by TrainingArguments.get_warmup_steps).
TEST(Schedule, MatchesTransformersSchedulers) {
  const auto path = std::filesystem::path(__FILE__).parent_path().parent_path() / "fixtures" / "schedule" /
                    "transformers_lr.json";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  const auto j = nlohmann::json::parse(in);
  ASSERT_GE(j.at("cases").size(), 8u);
  for (const auto& c : j.at("cases")) {
    ScheduleConfig sc;
    sc.type = c.at("type").get<std::string>();
    const auto& lrs = c.at("lr_per_step");
    sc.total_steps = c.at("steps").get<int64_t>();
    sc.warmup_steps = c.value("warmup_steps", int64_t{0});
    sc.warmup_ratio = c.value("warmup_ratio", 0.0);
    sc.min_lr = c.value("min_lr", 0.0);
    sc.min_lr_rate = c.value("min_lr_rate", 0.0);
    sc.learning_rate = c.at("learning_rate").get<double>();
    LrSchedule s(sc);
    EXPECT_EQ(s.warmup_steps(), c.at("resolved_warmup_steps").get<int64_t>()) << c.dump();
    for (size_t k = 0; k < lrs.size(); ++k) {
      const double want = lrs[k].get<double>();
      EXPECT_NEAR(s.lr_at(static_cast<int64_t>(k) + 1), want, 1e-15 + 1e-13 * std::fabs(want))
          << sc.type << " step " << k + 1;
    }
  }
}

TEST(Schedule, BadOptionsNameTheOption) {
  test::expect_error([] { LrSchedule({.type = "polynomial"}); }, {"--lr-scheduler-type", "polynomial", "cosine"});
  test::expect_error([] { LrSchedule({.type = "linear"}); }, {"total number of steps"});
  test::expect_error([] { LrSchedule({.type = "linear", .total_steps = 5, .warmup_ratio = 2}); }, {"--warmup-ratio"});
  test::expect_error([] { LrSchedule({.type = "cosine_with_min_lr", .total_steps = 5}); }, {"min_lr"});
}

}  // namespace
}  // namespace vkf
