// Note [The next probe chosen to decide]: under a budget the rungs that can
// weigh on the leading hypotheses run first, and a budget spent says so.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "harness/diagnose/rungs.h"

namespace dbh::harness::diagnose {
namespace {

Rung rung(RungId id) { return Rung{id, "r", "variant", {}, "", {}, false}; }

bool about(HypothesisId h, RungId r) {
  const auto& ids = rungs_about(h);
  return std::find(ids.begin(), ids.end(), r) != ids.end();
}

TEST(RungsTest, TheRungsThatCanSeparateTheTiedHypothesesComeFirstInTheirOwnOrder) {
  const std::vector<RungId> variants = {RungId::kCudnnDeterministic, RungId::kCudnnBenchmarkOff, RungId::kFp32,
                                        RungId::kSmallerBatch,       RungId::kMoreMemory,        RungId::kFixedBatch,
                                        RungId::kBlockingLaunches};
  for (const HypothesisId a : {HypothesisId::kMemory, HypothesisId::kCudnn, HypothesisId::kData}) {
    for (const HypothesisId b : {HypothesisId::kModel, HypothesisId::kAmp}) {
      std::vector<Rung> rungs;
      for (const RungId id : variants) rungs.push_back(rung(id));
      LadderConclusion now;
      now.tied = {a, b};
      order_to_decide(rungs, now);
      // Every rung about a tied hypothesis before every other, each part in
      // the declared order.
      size_t first_other = rungs.size();
      for (size_t i = 0; i < rungs.size(); ++i) {
        const bool speaks = about(a, rungs[i].id) || about(b, rungs[i].id);
        if (!speaks && first_other == rungs.size()) first_other = i;
        if (speaks) {
          EXPECT_LT(i, first_other) << "a rung about a tied hypothesis after one that is not";
        }
      }
      for (size_t i = 1; i < rungs.size(); ++i) {
        const bool same_part = (about(a, rungs[i].id) || about(b, rungs[i].id)) ==
                               (about(a, rungs[i - 1].id) || about(b, rungs[i - 1].id));
        const auto position = [&](RungId id) { return std::find(variants.begin(), variants.end(), id) - variants.begin(); };
        if (same_part) {
          EXPECT_LT(position(rungs[i - 1].id), position(rungs[i].id));
        }
      }
    }
  }
}

TEST(RungsTest, WithoutATieTheBestHypothesisLeads) {
  std::vector<Rung> rungs = {rung(RungId::kBlockingLaunches), rung(RungId::kSmallerBatch)};
  LadderConclusion now;
  Hypothesis memory;
  memory.id = HypothesisId::kMemory;
  now.ranked = {memory};
  order_to_decide(rungs, now);
  ASSERT_TRUE(about(HypothesisId::kMemory, RungId::kSmallerBatch));
  EXPECT_EQ(rungs.front().id, RungId::kSmallerBatch);
}

TEST(RungsTest, ABudgetIsSpentByWhatRuns) {
  ProbeBudget none;
  EXPECT_FALSE(none.exhausted());  // 0: no limit
  ProbeBudget two{2, 0};
  EXPECT_FALSE(two.exhausted());
  two.spent = 2;
  EXPECT_TRUE(two.exhausted());
  EXPECT_EQ(two.why_not(), "not run: the probe budget (--max-probes 2) was spent");
}

}  // namespace
}  // namespace dbh::harness::diagnose
