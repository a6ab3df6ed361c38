// Note [Nothing left to train]: one decision for the worker's input check,
// the worker's resume and `dbh train --resume`.
#include <gtest/gtest.h>

#include <string>

#include "harness/worker/training.h"

namespace dbh::harness {
namespace {

TEST(NothingLeftToTrain, ACheckpointAtOrAfterTheLastStepLeavesNothing) {
  Scenario s;
  s.train.max_steps = 10;
  EXPECT_FALSE(nothing_left_to_train(s, 0).has_value());
  EXPECT_FALSE(nothing_left_to_train(s, 9).has_value());
  const auto at_last = nothing_left_to_train(s, 10);
  ASSERT_TRUE(at_last.has_value());
  EXPECT_EQ(at_last->step, 10);
  EXPECT_EQ(std::string(at_last->key), "train.max_steps");
  ASSERT_TRUE(nothing_left_to_train(s, 12).has_value());
}

TEST(NothingLeftToTrain, AReplayThatStopsEarlierEndsAtItsStopAndSaysSo) {
  Scenario s;
  s.train.max_steps = 10;
  s.train.stop_after = 4;
  EXPECT_FALSE(nothing_left_to_train(s, 3).has_value());
  const auto last = nothing_left_to_train(s, 4);
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->step, 4);
  EXPECT_EQ(std::string(last->key), "train.stop_after");
  // A stop at or after the last step changes nothing: max_steps decides.
  s.train.stop_after = 10;
  ASSERT_TRUE(nothing_left_to_train(s, 10).has_value());
  EXPECT_EQ(std::string(nothing_left_to_train(s, 10)->key), "train.max_steps");
}

}  // namespace
}  // namespace dbh::harness
