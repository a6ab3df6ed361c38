// Properties of the running median (harness/common/running_median.h).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <vector>

#include "harness/common/running_median.h"

namespace dbh::harness {
namespace {

// After every value, the running median is the one the loss-spike monitor
// took by sorting the history: sorted[n / 2].
RC_GTEST_PROP(RunningMedianProp, EqualsTheUpperMedianOfTheSortedHistoryAfterEveryValue, ()) {
  // Few distinct values make ties common, many make them rare: both matter.
  const auto distinct = *rc::gen::inRange(1, 1000);
  const auto values = *rc::gen::container<std::vector<int>>(rc::gen::inRange(-distinct, distinct));
  RunningMedian m;
  std::vector<double> history;
  for (const int v : values) {
    const double x = v / 7.0;
    m.add(x);
    history.push_back(x);
    std::vector<double> sorted = history;
    std::sort(sorted.begin(), sorted.end());
    RC_ASSERT(m.size() == history.size());
    RC_ASSERT(m.median() == sorted[sorted.size() / 2]);
  }
}

TEST(RunningMedian, IsTheLargerMiddleValueOfAnEvenCount) {
  RunningMedian m;
  EXPECT_TRUE(m.empty());
  for (const double x : {5.0, 1.0, 3.0, 9.0}) m.add(x);  // 1 3 | 5 9
  EXPECT_FALSE(m.empty());
  EXPECT_EQ(m.median(), 5.0);
  m.add(0.0);  // 0 1 | 3 5 9
  EXPECT_EQ(m.median(), 3.0);
}

}  // namespace
}  // namespace dbh::harness
