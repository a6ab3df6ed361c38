// Note [A numerics reference]: the comparison of two sides is a pure function
// of their numbers; these tests build the sides by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "harness/common/error.h"
#include "harness/numerics/reference.h"

namespace dbh::harness::numerics {
namespace {

// A run of `steps` steps whose numbers are `base` scaled by (1 + eps) from
// step `from` on, in module `module` (every module before it in forward order
// and the loss otherwise untouched; from `module` on everything moves).
RunNumbers run_of(int steps, double eps = 0, int from = 1 << 30, int module = 0) {
  RunNumbers r;
  for (int s = 0; s < steps; ++s) {
    StepNumbers st;
    st.step = s;
    const double moved = s >= from ? 1 + eps : 1;
    st.loss = (2.0 - 0.1 * s) * moved;
    st.grad_norm = (0.5 + 0.01 * s) * moved;
    for (int m = 0; m < 3; ++m) {
      const double f = s >= from && m >= module ? 1 + eps : 1;
      st.modules.push_back({"m" + std::to_string(m), (1.0 + m + 0.01 * s) * f, (0.1 * (m + 1)) * f});
    }
    r.steps.push_back(st);
  }
  return r;
}

Side side(std::vector<RunNumbers> runs, std::vector<RunNumbers> replays = {}) {
  Side s;
  s.runs = std::move(runs);
  s.replays = std::move(replays);
  return s;
}

TEST(NumericsReferenceTest, IdenticalSidesAreTheSame) {
  const Comparison c = compare(side({run_of(5), run_of(5)}), side({run_of(5), run_of(5)}));
  EXPECT_TRUE(c.same());
  EXPECT_EQ(c.steps, 5);
  EXPECT_TRUE(c.modules_compared);
  EXPECT_EQ(c.closest, 0);
  EXPECT_EQ(verdict_line(c).rfind("the same within the noise: 5 step(s)", 0), 0u) << verdict_line(c);
}

TEST(NumericsReferenceTest, ADifferenceBelowTheFloorIsTheSame) {
  // Both sides bit-deterministic, apart by 1e-5 relative: another summation
  // order, not another training.
  const Comparison c = compare(side({run_of(5), run_of(5)}), side({run_of(5, 1e-5, 2), run_of(5, 1e-5, 2)}));
  EXPECT_TRUE(c.same()) << verdict_line(c);
  EXPECT_GT(c.closest, 0);
  EXPECT_LT(c.closest, 1);
}

TEST(NumericsReferenceTest, APlantedChangeDepartsAtItsStepAndModule) {
  const Comparison c = compare(side({run_of(6), run_of(6)}), side({run_of(6, 1e-2, 3, 1), run_of(6, 1e-2, 3, 1)}));
  ASSERT_TRUE(c.departure.has_value()) << verdict_line(c);
  EXPECT_EQ(c.departure->step, 3);
  EXPECT_EQ(c.departure->module, "m1");
  EXPECT_EQ(c.departure->quantity, "output of m1");
  EXPECT_NEAR(c.departure->by, 1e-2, 1e-6);
  EXPECT_NEAR(c.departure->noise, Tolerance{}.relative_floor, 1e-12);
  EXPECT_NE(verdict_line(c).find("departs at step 3, first in the output of m1"), std::string::npos);
}

TEST(NumericsReferenceTest, ANondeterministicSideWidensTheNoise) {
  // Here the runs disagree among themselves by 2 % and sit 1 % from the
  // reference: that is inside what repeating here showed.
  const Comparison c = compare(side({run_of(4), run_of(4)}), side({run_of(4, 1e-2, 0), run_of(4, 3e-2, 0)}));
  EXPECT_TRUE(c.same()) << verdict_line(c);
  EXPECT_GT(c.largest_noise, 0.05);
}

TEST(NumericsReferenceTest, RepeatsThatDisagreeWildlyDecideNothing) {
  // One reference run with an absurd loss would otherwise widen the noise
  // until everything is "the same".
  RunNumbers wild = run_of(4);
  wild.steps[1].loss = 1e30;
  const Comparison c = compare(side({run_of(4), wild}), side({run_of(4, 0.2, 2), run_of(4, 0.2, 2)}));
  EXPECT_FALSE(c.same());
  EXPECT_EQ(verdict_line(c).rfind("not decided: at step 1 the loss's noise is", 0), 0u) << verdict_line(c);
}

TEST(NumericsReferenceTest, WithoutModuleNumbersTheLossIsCompared) {
  RunNumbers a = run_of(4), b = run_of(4, 0.05, 2);
  for (auto* r : {&a, &b}) {
    for (auto& s : r->steps) s.modules.clear();
  }
  const Comparison c = compare(side({a}), side({b}));
  EXPECT_FALSE(c.modules_compared);
  ASSERT_TRUE(c.departure.has_value());
  EXPECT_EQ(c.departure->step, 2);
  EXPECT_EQ(c.departure->quantity, "loss");
  ASSERT_FALSE(c.notes.empty());
  EXPECT_NE(c.notes.front().find("measured no module numbers"), std::string::npos);
}

TEST(NumericsReferenceTest, ShorterSideLimitsTheStepsAndSaysSo) {
  const Comparison c = compare(side({run_of(6)}), side({run_of(3), run_of(3)}));
  EXPECT_EQ(c.steps, 3);
  EXPECT_TRUE(c.same());
  ASSERT_FALSE(c.notes.empty());
  EXPECT_NE(c.notes.front().find("compared the 3 step(s)"), std::string::npos) << c.notes.front();
}

// A chaotic run: from step 2 on every number moves by `spread` × `sign` of
// its own (as trajectories that differed in the last digit at step 0 do by
// step 2), and by `eps` in module `module` from step `from` (as run_of).
RunNumbers chaotic(double sign, double spread, double eps = 0, int from = 1 << 30, int module = 0) {
  RunNumbers r = run_of(6, eps, from, module);
  for (auto& st : r.steps) {
    if (st.step < 2) continue;
    const double f = 1 + sign * spread;
    st.loss *= f;
    *st.grad_norm *= f;
    for (auto& m : st.modules) {
      *m.act *= f;
      *m.grad *= f;
    }
  }
  return r;
}

// Note [The same state, step by step]: the trajectories of a chaotic
// training spread by 5 % from step 2, which hides a 1 % change; started from
// the reference's state at every step, the same change is found where it
// starts, and the free runs' loss agrees.
TEST(NumericsReferenceTest, FromTheSameStateAChangeHiddenInTheTrajectoriesIsFoundWhereItStarts) {
  const Side reference = side({chaotic(0, 0.05), chaotic(1, 0.05), chaotic(-1, 0.05)});
  for (int from : {0, 2, 4, 5}) {
    const Side trajectories_only = side({chaotic(0.5, 0.05, 0.01, from, 1)});
    const Comparison hidden = compare(reference, trajectories_only);
    if (from >= 2) {
      EXPECT_TRUE(hidden.same()) << from << ": " << verdict_line(hidden);
    }
    const Side here = side({chaotic(0.5, 0.05, 0.01, from, 1)},
                           {run_of(6, 0.01, from, 1), run_of(6, 0.01 + 1e-7, from, 1), run_of(6, 0.01, from, 1)});
    const Comparison c = compare(reference, here);
    ASSERT_TRUE(c.departure.has_value()) << from << ": " << verdict_line(c);
    EXPECT_TRUE(c.departure->same_state);
    EXPECT_EQ(c.departure->step, from);
    EXPECT_EQ(c.departure->quantity, "output of m1");
    EXPECT_EQ(c.steps_from_same_state, 6);
    EXPECT_NE(verdict_line(c).find("departs at step " + std::to_string(from) +
                                   ", first in the output of m1 (from the same state)"),
              std::string::npos)
        << verdict_line(c);
  }
  // Nothing planted: the same, from the same state and on the free loss.
  const Comparison same = compare(reference, side({chaotic(0.5, 0.05)}, {run_of(6), run_of(6, 1e-6, 0), run_of(6)}));
  EXPECT_TRUE(same.same()) << verdict_line(same);
  EXPECT_EQ(verdict_line(same).rfind("the same within the noise: 6 step(s) each from the same state", 0), 0u)
      << verdict_line(same);
}

// A kernel that computes differently from process to process: each process
// of the reference moves every number by its own amount (3 %, 0 %, -3 %),
// the replays here by theirs, tightly together and 3 % from the
// reference's first process. The reference measured that much at its first
// step, where its processes shared a state: the same. Nothing measured
// there (one process, or processes that agree), the same cluster departs.
TEST(NumericsReferenceTest, TheReferencesOwnOneStepNoiseCountsAgainstATightClusterOfReplays) {
  const std::vector<RunNumbers> replays = {run_of(6, -0.03, 0), run_of(6, -0.0301, 0), run_of(6, -0.0302, 0)};
  const Side nondeterministic = side({run_of(6), run_of(6, 0.03, 0), run_of(6, -0.03, 0)});
  const Comparison c = compare(nondeterministic, side({run_of(6, 0.01, 0)}, replays));
  EXPECT_TRUE(c.same()) << verdict_line(c);
  EXPECT_NEAR(c.largest_noise, 4 * 0.06, 1e-9);
  for (const Side& quiet : {side({run_of(6)}), side({run_of(6), run_of(6, 1e-6, 0), run_of(6)})}) {
    const Comparison d = compare(quiet, side({run_of(6, 0.01, 0)}, replays));
    ASSERT_TRUE(d.departure.has_value()) << verdict_line(d);
    EXPECT_TRUE(d.departure->same_state);
    EXPECT_EQ(d.departure->step, 0);
  }
}

// Every step computes alike from the same state, yet the free run leaves the
// reference's spread: what differs is how the parameters are updated.
TEST(NumericsReferenceTest, StepsThatComputeAlikeButTrajectoriesThatPartAreTheUpdate) {
  const Side reference = side({run_of(6), run_of(6, 1e-4, 0), run_of(6, -1e-4, 0)});
  const Comparison c = compare(reference, side({run_of(6, 0.2, 3)}, {run_of(6), run_of(6), run_of(6)}));
  ASSERT_TRUE(c.departure.has_value()) << verdict_line(c);
  EXPECT_FALSE(c.departure->same_state);
  EXPECT_EQ(c.departure->step, 3);
  EXPECT_EQ(c.departure->quantity, "loss");
  EXPECT_NE(verdict_line(c).find("the parameters' updates differ"), std::string::npos) << verdict_line(c);
}

TEST(NumericsReferenceTest, TheFloorIsThePrecisionsOwnRoundingWhenCoarser) {
  EXPECT_EQ(tolerance_for(model::Precision::kFp32).relative_floor, 1e-3);
  EXPECT_EQ(tolerance_for(model::Precision::kFp16).relative_floor, 1e-3);
  EXPECT_EQ(tolerance_for(model::Precision::kBf16).relative_floor, 1.0 / 256);
  // 2e-3 apart from the same state: a departure in fp32, bf16's own rounding.
  const Side reference = side({run_of(3)});
  const Side here = side({run_of(3)}, {run_of(3, 2e-3, 1, 0), run_of(3, 2e-3, 1, 0)});
  EXPECT_FALSE(compare(reference, here, tolerance_for(model::Precision::kFp32)).same());
  EXPECT_TRUE(compare(reference, here, tolerance_for(model::Precision::kBf16)).same());
}

TEST(NumericsReferenceTest, TheFileRoundTripsAndBadFilesNameTheKey) {
  Reference r;
  r.scenario = "tiny";
  r.scenario_hash = "abc";
  r.recorded_at = "2026-12-02T00:00:00Z";
  r.side = side({run_of(2), run_of(2)});
  r.side.runs[1].variant = "one intra-op thread";
  r.side.runs[0].channels_last = true;
  r.side.machine = {{"cpu", "x"}};
  r.state_steps = {0, 1};
  const Reference back = reference_from_json(nlohmann::json::parse(to_json(r).dump()), "r.json");
  EXPECT_EQ(back.scenario, "tiny");
  ASSERT_EQ(back.side.runs.size(), 2u);
  EXPECT_TRUE(compare(r.side, back.side).same());
  EXPECT_EQ(back.side.runs[1].steps[1].modules[2].module, "m2");
  EXPECT_EQ(back.side.runs[1].variant, "one intra-op thread");
  EXPECT_EQ(back.state_steps, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(back.side.runs[0].channels_last, std::optional<bool>(true));
  EXPECT_EQ(back.side.runs[1].channels_last, std::nullopt);
  const auto message = [](const std::string& text) {
    try {
      (void)reference_from_json(nlohmann::json::parse(text), "r.json");
    } catch (const ScenarioError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message(R"({"format": "other"})").find("r.json: format: expected \"dbh-numerics-reference/1\""),
            std::string::npos);
  EXPECT_NE(message(R"({"format": "dbh-numerics-reference/1", "runs": []})").find("r.json: runs: expected"),
            std::string::npos);
  EXPECT_NE(message(R"({"format": "dbh-numerics-reference/1", "runs": [{"steps": [{"step": 0}]}]})")
                .find("r.json: runs.0.steps.0.loss: expected a finite number"),
            std::string::npos);
  EXPECT_NE(message(R"({"format": "dbh-numerics-reference/1", "state_steps": [-1], "runs": [{"steps": []}]})")
                .find("r.json: state_steps.0: expected a step index"),
            std::string::npos);
  EXPECT_NE(message(R"({"format": "dbh-numerics-reference/1", "runs": [{"channels_last": 0, "steps": []}]})")
                .find("r.json: runs.0.channels_last: expected true or false"),
            std::string::npos);
}

// Note [The layout, held to the reference's]: the first run's layout, and
// only where this side leaves the layout to dbh.
TEST(NumericsReferenceTest, TheLayoutHeldIsTheFirstRunsWhereThisSideLeavesItToDbh) {
  Reference r;
  r.side = side({run_of(2), run_of(2)});
  EXPECT_EQ(layout_to_hold(r, true), std::nullopt) << "an older reference does not say";
  r.side.runs[0].channels_last = true;
  r.side.runs[1].channels_last = false;
  EXPECT_EQ(layout_to_hold(r, true), std::optional<bool>(true));
  EXPECT_EQ(layout_to_hold(r, false), std::nullopt) << "a layout the user set is compared as it is";
  r.side.runs[0].channels_last = false;
  EXPECT_EQ(layout_to_hold(r, true), std::optional<bool>(false));
  EXPECT_EQ(layout_to_hold(Reference{}, true), std::nullopt);
}

}  // namespace
}  // namespace dbh::harness::numerics
