// Note [The next probe chosen to decide]: under a budget the rungs that can
// weigh on the leading hypotheses run first, and a budget spent says so.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
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

// Note [The next probe chosen to decide], after every probe: the first rung
// runs for the tie the ladder left (memory or the device); its result leaves
// the model alone on top, so the next is the rung about the model, ahead of
// the one about memory that an order chosen once would have run second.
TEST(RungsTest, TheNextProbeIsChosenAgainAfterEveryProbe) {
  std::vector<Rung> rungs = {rung(RungId::kBlockingLaunches), rung(RungId::kSmallerBatch), rung(RungId::kFixedBatch)};
  ASSERT_TRUE(about(HypothesisId::kDevice, RungId::kBlockingLaunches));
  ASSERT_TRUE(about(HypothesisId::kMemory, RungId::kSmallerBatch));
  ASSERT_TRUE(about(HypothesisId::kModel, RungId::kFixedBatch));
  ASSERT_FALSE(about(HypothesisId::kModel, RungId::kSmallerBatch));
  int judged = 0;
  const auto judge = [&] {
    ++judged;
    LadderConclusion now;
    const bool launches_ran =
        std::any_of(rungs.begin(), rungs.end(), [](const Rung& r) { return r.ran && r.id == RungId::kBlockingLaunches; });
    if (!launches_ran) {
      now.tied = {HypothesisId::kDevice, HypothesisId::kMemory};
    } else {
      Hypothesis model;
      model.id = HypothesisId::kModel;
      now.ranked = {model};
    }
    return now;
  };
  std::vector<RungId> order;
  run_to_decide(rungs, judge, [&](Rung& r) {
    r.ran = true;
    order.push_back(r.id);
  });
  EXPECT_EQ(order, (std::vector<RungId>{RungId::kBlockingLaunches, RungId::kFixedBatch, RungId::kSmallerBatch}));
  EXPECT_EQ(judged, 3);  // before every probe
  // Chosen once, the order would have run memory's rung second.
  std::vector<Rung> once = {rung(RungId::kBlockingLaunches), rung(RungId::kSmallerBatch), rung(RungId::kFixedBatch)};
  LadderConclusion tie;
  tie.tied = {HypothesisId::kDevice, HypothesisId::kMemory};
  order_to_decide(once, tie);
  EXPECT_EQ(once[1].id, RungId::kSmallerBatch);
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

// Note [What the command checks is not a cause]: what sets the checks stays
// on both sides; what changes the training is what the run without the
// command's overrides drops, in every spelling a command uses.
TEST(RungsTest, TheCommandsChecksAreKeptAndItsChangesDropped) {
  const CommandOverrides split = split_command_overrides(
      {"optim.clip=1e-12", "monitors.learning_window=8", "data.subset=[2,3]", "expect={outcome: passed}",
       "limits.deadline_s=60", "repeat.in_process=2", "monitors.numerics_jitter=0.01", "train.lr=7000",
       "faults=[{name: leak}]", "monitors={learning_window: 8}"});
  EXPECT_EQ(split.checks, (std::vector<std::string>{"monitors.learning_window=8", "expect={outcome: passed}",
                                                    "limits.deadline_s=60", "repeat.in_process=2",
                                                    "monitors={learning_window: 8}"}));
  EXPECT_EQ(split.changes, (std::vector<std::string>{"optim.clip=1e-12", "data.subset=[2,3]",
                                                     "monitors.numerics_jitter=0.01", "train.lr=7000",
                                                     "faults=[{name: leak}]"}));
  const auto only_checks = without_overrides_rungs(split_command_overrides({"monitors.learning_window=8"}));
  ASSERT_EQ(only_checks.size(), 1u);
  EXPECT_EQ(only_checks[0].applies, "the command's overrides set only what is checked");
  const auto rung = without_overrides_rungs(split);
  EXPECT_EQ(rung[0].applies, "");
  EXPECT_EQ(rung[0].name.find("learning_window"), std::string::npos) << rung[0].name;
  EXPECT_NE(rung[0].name.find("optim.clip=1e-12"), std::string::npos) << rung[0].name;
  EXPECT_EQ(without_overrides_rungs(CommandOverrides{})[0].applies, "the command has none");
}

}  // namespace
}  // namespace dbh::harness::diagnose
