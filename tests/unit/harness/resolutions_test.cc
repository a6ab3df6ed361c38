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
  EXPECT_EQ(supervisor::resolution_verdict(scenario::Outcome::kPassed), supervisor::ResolutionVerdict::kConfirmed);
  EXPECT_EQ(supervisor::resolution_verdict(scenario::Outcome::kCrashed), supervisor::ResolutionVerdict::kRefuted);
  EXPECT_EQ(supervisor::resolution_verdict(scenario::Outcome::kDiverged), supervisor::ResolutionVerdict::kRefuted);
  EXPECT_EQ(supervisor::resolution_verdict(scenario::Outcome::kUnresolved), supervisor::ResolutionVerdict::kUnresolved);
  EXPECT_EQ(supervisor::resolution_verdict(scenario::Outcome::kSkipped), supervisor::ResolutionVerdict::kUnresolved);
  EXPECT_EQ(to_string(supervisor::ResolutionVerdict::kNotApplicable), "not applicable");
  EXPECT_EQ(to_string(supervisor::ResolutionVerdict::kConfirmed), "confirmed");
}

// Each check is run once with its overrides and controls=[]; one that
// changes nothing is not run; one the scenario refuses is not applicable and
// names the refusal; the verdicts follow the runs' outcomes.
TEST(TryResolutions, RunsWhatChangesTheScenarioAndMarksEachCheck) {
  scenario::Scenario s;
  s.data.on_invalid = model::OnInvalid::kError;
  const auto resolved = nlohmann::json::parse(scenario::resolved_json(s));
  const kb::FailureClass cls = WithChecks({{0, {"data.on_invalid=skip"}},
                                       {1, {"data.on_invalid=error"}},  // the scenario's own value
                                       {2, {"train.lr=0.5"}},
                                       {3, {"data.preflight=false"}}});
  std::vector<std::vector<std::string>> ran;
  const supervisor::RunResolution run = [&](const supervisor::ResolutionCheck& check, const std::vector<std::string>& with, size_t index) {
    ran.push_back(with);
    EXPECT_EQ(check.overrides, cls.checks[index].overrides);
    if (index == 2) throw ScenarioError("train.lr: expected at most 0.1");
    supervisor::ResolutionRun r;
    r.outcome = index == 0 ? scenario::Outcome::kPassed : scenario::Outcome::kFailed;
    r.klass = index == 0 ? "" : "data_invalid";
    r.dir = "resolution-" + std::to_string(index + 1);
    return r;
  };
  const auto checks = supervisor::try_resolutions(cls, resolved, run);
  ASSERT_EQ(checks.size(), 4u);
  EXPECT_EQ(ran, (std::vector<std::vector<std::string>>{{"data.on_invalid=skip", "controls=[]"},
                                                         {"train.lr=0.5", "controls=[]"},
                                                         {"data.preflight=false", "controls=[]"}}));
  EXPECT_EQ(checks[0].verdict, supervisor::ResolutionVerdict::kConfirmed);
  EXPECT_EQ(checks[0].outcome, "passed");
  EXPECT_EQ(checks[0].dir, "resolution-1");
  EXPECT_EQ(checks[1].verdict, supervisor::ResolutionVerdict::kNotApplicable);
  EXPECT_EQ(checks[1].outcome, "");
  EXPECT_EQ(checks[1].klass, "");  // it changes nothing: no refusal to name
  EXPECT_EQ(checks[2].verdict, supervisor::ResolutionVerdict::kNotApplicable);
  EXPECT_EQ(checks[2].klass, "train.lr: expected at most 0.1");
  EXPECT_EQ(checks[3].verdict, supervisor::ResolutionVerdict::kRefuted);
  EXPECT_EQ(checks[3].klass, "data_invalid");
  EXPECT_EQ(checks[3].resolution, 3u);
}

// `{key/N}` of a real value (the learning rate) is that value scaled, in as
// few digits as tell it; of an integer it stays an integer of at least 1.
TEST(TryResolutions, AComputedValueScalesRealsAndIntegers) {
  scenario::Scenario s;
  s.train.lr = 50;
  s.data.batch_size = 1;
  const auto resolved = nlohmann::json::parse(scenario::resolved_json(s));
  kb::FailureClass::Check lr{0, {"train.lr={train.lr/10}"}};
  EXPECT_EQ(kb::check_overrides(lr, resolved, nullptr), (std::vector<std::string>{"train.lr=5"}));
  s.train.lr = 0.003;
  lr.overrides = {"train.lr={train.lr*3}"};
  EXPECT_EQ(kb::check_overrides(lr, nlohmann::json::parse(scenario::resolved_json(s)), nullptr),
            (std::vector<std::string>{"train.lr=0.009"}));
  bool changes = true;
  const kb::FailureClass::Check half{0, {"data.batch_size={data.batch_size/2}"}};
  EXPECT_EQ(kb::check_overrides(half, resolved, &changes), (std::vector<std::string>{"data.batch_size=1"}));
  EXPECT_FALSE(changes) << "a batch of 1 halved is still 1";
}

// A stop request ends the loop before the next run; what ran is kept.
TEST(TryResolutions, AStopEndsTheLoopBeforeTheNextRun) {
  scenario::Scenario s;
  const auto resolved = nlohmann::json::parse(scenario::resolved_json(s));
  const kb::FailureClass cls = WithChecks({{0, {"train.lr=0.001"}}, {1, {"train.lr=0.0001"}}});
  int runs = 0;
  const supervisor::RunResolution run = [&](const supervisor::ResolutionCheck&, const std::vector<std::string>&, size_t) {
    ++runs;
    return supervisor::ResolutionRun{scenario::Outcome::kPassed, "", ""};
  };
  const auto checks = supervisor::try_resolutions(cls, resolved, run, [&] { return runs > 0; });
  EXPECT_EQ(runs, 1);
  ASSERT_EQ(checks.size(), 1u);
  EXPECT_EQ(checks[0].verdict, supervisor::ResolutionVerdict::kConfirmed);
}

// Note [A measured value over a rule of thumb]: a check that sets a key the
// command measured runs with the measured value and says what measured it;
// a check of another key keeps its template.
TEST(TryResolutions, AMeasuredValueReplacesTheTemplates) {
  scenario::Scenario s;
  s.train.lr = 7000;
  const auto resolved = nlohmann::json::parse(scenario::resolved_json(s));
  const kb::FailureClass cls = WithChecks({{0, {"train.lr={train.lr/10}"}}, {1, {"train.grad_clip=1"}}});
  std::vector<std::vector<std::string>> ran;
  const supervisor::RunResolution run = [&](const supervisor::ResolutionCheck&, const std::vector<std::string>& with,
                                            size_t) {
    ran.push_back(with);
    return supervisor::ResolutionRun{scenario::Outcome::kPassed, "", ""};
  };
  const supervisor::MeasuredValues measured{{{"train.lr", "17.5"}}, "the learning-rate search"};
  const auto checks = supervisor::try_resolutions(cls, resolved, run, [] { return false; }, measured);
  EXPECT_EQ(ran, (std::vector<std::vector<std::string>>{{"train.lr=17.5", "controls=[]"},
                                                         {"train.grad_clip=1", "controls=[]"}}));
  ASSERT_EQ(checks.size(), 2u);
  EXPECT_EQ(checks[0].overrides, (std::vector<std::string>{"train.lr=17.5"}));
  EXPECT_EQ(checks[0].measured_by, "the learning-rate search");
  EXPECT_EQ(checks[1].measured_by, "");
  // Nothing measured: the rule of thumb, a tenth.
  ran.clear();
  (void)supervisor::try_resolutions(cls, resolved, run);
  EXPECT_EQ(ran.front(), (std::vector<std::string>{"train.lr=700", "controls=[]"}));
}

}  // namespace
}  // namespace dbh::harness
