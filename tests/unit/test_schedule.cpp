// Learning-rate schedules against values worked out by hand from transformers' lambdas
// (optimization.py): LambdaLR multiplies the base rate by lambda(k) at scheduler step k, and the
// k-th optimizer step (1-based) uses lambda(k - 1).
#include <cmath>
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

TEST(Schedule, BadOptionsNameTheOption) {
  test::expect_error([] { LrSchedule({.type = "polynomial"}); }, {"--lr-scheduler-type", "polynomial", "cosine"});
  test::expect_error([] { LrSchedule({.type = "linear"}); }, {"total number of steps"});
  test::expect_error([] { LrSchedule({.type = "linear", .total_steps = 5, .warmup_ratio = 2}); }, {"--warmup-ratio"});
  test::expect_error([] { LrSchedule({.type = "cosine_with_min_lr", .total_steps = 5}); }, {"min_lr"});
}

}  // namespace
}  // namespace vkf
