#include <gtest/gtest.h>

#include <cmath>

#include "core/error.hpp"
#include "optim/lr_schedule.hpp"

namespace mpf {

TEST(LRSchedule, WarmupThenCosineToTheFinalFraction) {
  LRSchedule s;
  s.lr = 1.0f;
  s.warmup = 4;
  s.steps = 14;
  s.final_lr_frac = 0.1f;
  for (int k = 0; k < 4; ++k) EXPECT_FLOAT_EQ(learning_rate(s, k), (k + 1) / 4.0f);
  EXPECT_FLOAT_EQ(learning_rate(s, 4), 1.0f);     // cosine starts at the peak
  EXPECT_FLOAT_EQ(learning_rate(s, 9), 0.55f);    // halfway: min + (lr - min)/2
  EXPECT_NEAR(learning_rate(s, 14), 0.1f, 1e-6);  // ends at lr * final_frac
  for (int k = 5; k < 14; ++k) EXPECT_LT(learning_rate(s, k), learning_rate(s, k - 1));
}

TEST(LRSchedule, ConstantAfterWarmup) {
  LRSchedule s;
  s.kind = LRSchedule::Kind::Constant;
  s.lr = 0.5f;
  s.warmup = 2;
  s.steps = 10;
  EXPECT_FLOAT_EQ(learning_rate(s, 0), 0.25f);
  for (int k = 2; k < 10; ++k) EXPECT_FLOAT_EQ(learning_rate(s, k), 0.5f);
}

TEST(LRSchedule, UnknownKindIsAnInputError) {
  EXPECT_EQ(parse_schedule_kind("cosine"), LRSchedule::Kind::Cosine);
  EXPECT_THROW(parse_schedule_kind("linear"), InputError);
}

}  // namespace mpf
