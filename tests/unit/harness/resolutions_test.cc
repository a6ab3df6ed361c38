// Note [Resolutions that are tried]: one loop for `dbh run
// --verify-resolutions` and `dbh diagnose`, driven here without a process.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/common/error.h"
#include "harness/kb/knowledge_base.h"
#include "harness/scenario/scenario.h"
#include "harness/supervisor/resolutions.h"

namespace dbh::harness {
namespace {

kb::FailureClass WithChecks(std::vector<kb::FailureClass::Check> checks) {
  kb::FailureClass cls;
  cls.id = "data_invalid";
  cls.resolutions = {"first", "second", "third", "fourth"};
  cls.checks = std::move(checks);
  return cls;
}

TEST(ResolutionVerdict, FromTheRunsOutcome) {
  EXPECT_EQ(resolution_verdict(Outcome::kPassed), ResolutionVerdict::kConfirmed);
  EXPECT_EQ(resolution_verdict(Outcome::kCrashed), ResolutionVerdict::kRefuted);
  EXPECT_EQ(resolution_verdict(Outcome::kDiverged), ResolutionVerdict::kRefuted);
  EXPECT_EQ(resolution_verdict(Outcome::kUnresolved), ResolutionVerdict::kUnresolved);
  EXPECT_EQ(resolution_verdict(Outcome::kSkipped), ResolutionVerdict::kUnresolved);
  EXPECT_EQ(to_string(ResolutionVerdict::kNotApplicable), "not applicable");
  EXPECT_EQ(to_string(ResolutionVerdict::kConfirmed), "confirmed");
}

// Each check is run once with its overrides and controls=[]; one that
// changes nothing is not run; one the scenario refuses is not applicable and
// names the refusal; the verdicts follow the runs' outcomes.
TEST(TryResolutions, RunsWhatChangesTheScenarioAndMarksEachCheck) {
  Scenario s;
  s.data.on_invalid = model::OnInvalid::kError;
  const auto resolved = nlohmann::json::parse(resolved_json(s));
  const kb::FailureClass cls = WithChecks({{0, {"data.on_invalid=skip"}},
                                       {1, {"data.on_invalid=error"}},  // the scenario's own value
                                       {2, {"train.lr=0.5"}},
                                       {3, {"data.preflight=false"}}});
  std::vector<std::vector<std::string>> ran;
  const RunResolution run = [&](const ResolutionCheck& check, const std::vector<std::string>& with, size_t index) {
    ran.push_back(with);
    EXPECT_EQ(check.overrides, cls.checks[index].overrides);
    if (index == 2) throw ScenarioError("train.lr: expected at most 0.1");
    ResolutionRun r;
    r.outcome = index == 0 ? Outcome::kPassed : Outcome::kFailed;
    r.klass = index == 0 ? "" : "data_invalid";
    r.dir = "resolution-" + std::to_string(index + 1);
    return r;
  };
  const auto checks = try_resolutions(cls, resolved, run);
  ASSERT_EQ(checks.size(), 4u);
  EXPECT_EQ(ran, (std::vector<std::vector<std::string>>{{"data.on_invalid=skip", "controls=[]"},
                                                         {"train.lr=0.5", "controls=[]"},
                                                         {"data.preflight=false", "controls=[]"}}));
  EXPECT_EQ(checks[0].verdict, ResolutionVerdict::kConfirmed);
  EXPECT_EQ(checks[0].outcome, "passed");
  EXPECT_EQ(checks[0].dir, "resolution-1");
  EXPECT_EQ(checks[1].verdict, ResolutionVerdict::kNotApplicable);
  EXPECT_EQ(checks[1].outcome, "");
  EXPECT_EQ(checks[1].klass, "");  // it changes nothing: no refusal to name
  EXPECT_EQ(checks[2].verdict, ResolutionVerdict::kNotApplicable);
  EXPECT_EQ(checks[2].klass, "train.lr: expected at most 0.1");
  EXPECT_EQ(checks[3].verdict, ResolutionVerdict::kRefuted);
  EXPECT_EQ(checks[3].klass, "data_invalid");
  EXPECT_EQ(checks[3].resolution, 3u);
}

// `{key/N}` of a real value (the learning rate) is that value scaled, in as
// few digits as tell it; of an integer it stays an integer of at least 1.
TEST(TryResolutions, AComputedValueScalesRealsAndIntegers) {
  Scenario s;
  s.train.lr = 50;
  s.data.batch_size = 1;
  const auto resolved = nlohmann::json::parse(resolved_json(s));
  kb::FailureClass::Check lr{0, {"train.lr={train.lr/10}"}};
  EXPECT_EQ(kb::check_overrides(lr, resolved, nullptr), (std::vector<std::string>{"train.lr=5"}));
  s.train.lr = 0.003;
  lr.overrides = {"train.lr={train.lr*3}"};
  EXPECT_EQ(kb::check_overrides(lr, nlohmann::json::parse(resolved_json(s)), nullptr),
            (std::vector<std::string>{"train.lr=0.009"}));
  bool changes = true;
  const kb::FailureClass::Check half{0, {"data.batch_size={data.batch_size/2}"}};
  EXPECT_EQ(kb::check_overrides(half, resolved, &changes), (std::vector<std::string>{"data.batch_size=1"}));
  EXPECT_FALSE(changes) << "a batch of 1 halved is still 1";
}

// A stop request ends the loop before the next run; what ran is kept.
TEST(TryResolutions, AStopEndsTheLoopBeforeTheNextRun) {
  Scenario s;
  const auto resolved = nlohmann::json::parse(resolved_json(s));
  const kb::FailureClass cls = WithChecks({{0, {"train.lr=0.001"}}, {1, {"train.lr=0.0001"}}});
  int runs = 0;
  const RunResolution run = [&](const ResolutionCheck&, const std::vector<std::string>&, size_t) {
    ++runs;
    return ResolutionRun{Outcome::kPassed, "", ""};
  };
  const auto checks = try_resolutions(cls, resolved, run, [&] { return runs > 0; });
  EXPECT_EQ(runs, 1);
  ASSERT_EQ(checks.size(), 1u);
  EXPECT_EQ(checks[0].verdict, ResolutionVerdict::kConfirmed);
}

}  // namespace
}  // namespace dbh::harness
