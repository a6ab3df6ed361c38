// Note [The learning rate, searched]: the search's plan against trainings
// whose stable rates end at a threshold, and where it stops. No process.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "harness/diagnose/lr_search.h"

namespace dbh::harness::diagnose {
namespace {

// Runs the search against a training that trains at every rate up to
// `threshold` and fails above it.
LearningRateSearch run(double failing, double floor, double threshold, int budget = 9) {
  LearningRateSearch search(failing, floor, budget);
  while (const auto rate = search.next()) {
    search.record(*rate, *rate <= threshold ? RateTry::Result::kTrains : RateTry::Result::kFails);
  }
  return search;
}

// The case: a rate set 5,000 times the configuration's 0.01 is
// searched by decades (5, 0.5) and then halvings of the failing decade.
TEST(LearningRateSearch, StepsDownByDecadesThenHalvesTheFailingDecade) {
  const auto s = run(50, 0.01, 0.3);
  ASSERT_EQ(s.tries().size(), 4u);
  EXPECT_DOUBLE_EQ(s.tries()[0].rate, 5);
  EXPECT_DOUBLE_EQ(s.tries()[1].rate, 0.5);
  EXPECT_DOUBLE_EQ(s.tries()[2].rate, 0.05);  // the first that trains
  EXPECT_DOUBLE_EQ(s.tries()[3].rate, 0.25);  // half of the decade that failed: trains
  ASSERT_TRUE(s.answer().has_value());
  EXPECT_DOUBLE_EQ(*s.answer(), 0.25);
  EXPECT_FALSE(s.reached_floor());
}

TEST(LearningRateSearch, EndsAtTheConfiguredRateWhenNothingAboveItTrains) {
  const auto s = run(50, 0.01, 0.001);
  ASSERT_EQ(s.tries().size(), 4u);  // 5, 0.5, 0.05, and the floor itself
  EXPECT_DOUBLE_EQ(s.tries().back().rate, 0.01);
  EXPECT_TRUE(s.reached_floor());
  EXPECT_FALSE(s.answer().has_value());
}

TEST(LearningRateSearch, WithoutALowerConfiguredRateItLooksSixDecadesDown) {
  for (const double floor : {0.0, 50.0, 80.0}) {
    const auto s = run(50, floor, 0);
    EXPECT_DOUBLE_EQ(s.floor(), 50e-6) << floor;
    EXPECT_EQ(s.tries().size(), 6u) << floor;
    EXPECT_TRUE(s.reached_floor()) << floor;
  }
}

TEST(LearningRateSearch, ARateItCannotTellEndsTheSearch) {
  LearningRateSearch s(50, 0.01, 9);
  s.record(*s.next(), RateTry::Result::kFails);
  s.record(*s.next(), RateTry::Result::kUnknown);
  EXPECT_FALSE(s.next().has_value());
  EXPECT_FALSE(s.answer().has_value());
}

TEST(LearningRateSearch, TheBudgetBoundsTheProbes) {
  const auto s = run(1e6, 0, 0, 2);
  EXPECT_EQ(s.tries().size(), 2u);
  EXPECT_FALSE(LearningRateSearch(std::nan(""), 0, 9).next().has_value());
  EXPECT_FALSE(LearningRateSearch(0, 0, 9).next().has_value());
}

// For any threshold between the floor and the failing rate: the answer
// trains (at most the threshold), is within a factor 2 of it, and costs at
// most ⌈log10(failing/floor)⌉ + 3 probes.
TEST(LearningRateSearch, FindsTheThresholdWithinAHalvingInBoundedProbes) {
  std::mt19937_64 rng(20261206);
  std::uniform_real_distribution<double> exponent(-6, 4);
  for (int i = 0; i < 2000; ++i) {
    const double a = std::pow(10, exponent(rng)), b = std::pow(10, exponent(rng)), c = std::pow(10, exponent(rng));
    double v[3] = {a, b, c};
    std::sort(v, v + 3);
    const double floor = v[0], threshold = v[1], failing = v[2];
    if (failing / threshold < 1.0001 || threshold / floor < 1.0001) continue;
    const auto s = run(failing, floor, threshold, 20);
    ASSERT_TRUE(s.answer().has_value()) << failing << " " << floor << " " << threshold;
    EXPECT_LE(*s.answer(), threshold * (1 + 1e-12));
    EXPECT_GE(*s.answer(), threshold / 2 * (1 - 1e-12)) << failing << " " << floor << " " << threshold;
    EXPECT_LE(static_cast<double>(s.tries().size()), std::ceil(std::log10(failing / floor) - 1e-9) + 3);
  }
}

}  // namespace
}  // namespace dbh::harness::diagnose
