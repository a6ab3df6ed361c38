// Note [The run's verdicts]: what a run's trials mean, decided over values
// without a process: the processes' comparison, the controls' answer, the
// expectation and an interruption.

#include <gtest/gtest.h>

#include <signal.h>

#include <string>
#include <vector>

#include "harness/report/report.h"
#include "harness/run/run_verdict.h"
#include "harness/supervisor/outcome.h"

namespace dbh::harness {
namespace {

// A trial of `steps` steps whose loss bits are `bits` + the step.
run::TrialRecord Trial(scenario::Outcome outcome, int64_t steps, uint32_t bits, const std::string& label = "main") {
  run::TrialRecord t;
  t.label = label;
  t.analysis.outcome = outcome;
  for (int64_t i = 0; i < steps; ++i) {
    supervisor::StepRecord st;
    st.step = i;
    st.loss = 1.0 / static_cast<double>(i + 1);
    st.loss_bits = bits + static_cast<uint32_t>(i);
    st.micro_loss_bits = {st.loss_bits};
    st.grad_norm_bits = 7;
    t.analysis.steps.push_back(st);
  }
  t.analysis.run_checksums = {"abc"};
  return t;
}

run::RunReport Report(std::vector<run::TrialRecord> trials) {
  run::RunReport r;
  r.trials = std::move(trials);
  return r;
}

TEST(RunVerdict, IdenticalProcessesMeetADeterminismExpectation) {
  run::RunReport r = Report({Trial(scenario::Outcome::kPassed, 3, 100), Trial(scenario::Outcome::kPassed, 3, 100, "process 2")});
  r.scenario.expect.deterministic = true;
  run::decide_run(r, 2, 0);
  EXPECT_EQ(r.outcome, scenario::Outcome::kPassed);
  EXPECT_TRUE(r.determinism.checked);
  EXPECT_TRUE(r.determinism.identical);
  EXPECT_NE(r.determinism.detail.find("identical across 2 processes (checksum abc)"), std::string::npos)
      << r.determinism.detail;
  EXPECT_TRUE(r.expectation_met);
}

TEST(RunVerdict, PassingProcessesThatPartAreNondeterministicAtTheFirstStepThatDiffers) {
  run::TrialRecord other = Trial(scenario::Outcome::kPassed, 4, 100, "process 2");
  other.analysis.steps[2].loss_bits += 1;
  other.analysis.steps[2].micro_loss_bits = {other.analysis.steps[2].loss_bits};
  other.analysis.steps[3].loss_bits += 1;
  run::RunReport r = Report({Trial(scenario::Outcome::kPassed, 4, 100), other});
  r.scenario.expect.deterministic = true;
  run::decide_run(r, 2, 0);
  EXPECT_EQ(r.outcome, scenario::Outcome::kNondeterministic);
  EXPECT_EQ(r.failure.klass, "nondeterminism");
  ASSERT_TRUE(r.failure.step.has_value());
  EXPECT_EQ(*r.failure.step, 2);
  EXPECT_NE(r.failure.message.find("first divergence at step 2"), std::string::npos) << r.failure.message;
  EXPECT_FALSE(r.expectation_met);
}

TEST(RunVerdict, TheSameLossesWithAnotherGradientNormSayTheBackwardPassDiverged) {
  run::TrialRecord other = Trial(scenario::Outcome::kPassed, 2, 100, "process 2");
  other.analysis.steps[1].grad_norm_bits = 8;
  run::RunReport r = Report({Trial(scenario::Outcome::kPassed, 2, 100), other});
  run::decide_run(r, 2, 0);
  EXPECT_EQ(r.outcome, scenario::Outcome::kNondeterministic);
  EXPECT_NE(r.determinism.detail.find("the backward pass diverged"), std::string::npos) << r.determinism.detail;
}

TEST(RunVerdict, DifferentChecksumsAloneAreNondeterminism) {
  run::TrialRecord other = Trial(scenario::Outcome::kPassed, 2, 100, "process 2");
  other.analysis.run_checksums = {"abd"};
  run::RunReport r = Report({Trial(scenario::Outcome::kPassed, 2, 100), other});
  run::decide_run(r, 2, 0);
  EXPECT_FALSE(r.determinism.identical);
  EXPECT_NE(r.determinism.detail.find("final parameter checksums differ"), std::string::npos);
}

TEST(RunVerdict, AFailingRunStaysItsFailureWhateverTheProcessesSay) {
  run::TrialRecord main = Trial(scenario::Outcome::kDiverged, 2, 100);
  main.analysis.failure.klass = "nonfinite_gradient";
  run::RunReport r = Report({main, Trial(scenario::Outcome::kDiverged, 2, 200, "process 2")});
  run::decide_run(r, 2, 0);
  EXPECT_EQ(r.outcome, scenario::Outcome::kDiverged);
  EXPECT_EQ(r.failure.klass, "nonfinite_gradient");
  EXPECT_FALSE(r.determinism.identical);  // compared, and said so
}

TEST(RunVerdict, AControlThatPassesWithOtherDataMakesTheFailureDataDependent) {
  run::TrialRecord main = Trial(scenario::Outcome::kDiverged, 2, 100);
  main.analysis.failure.klass = "nonfinite_loss";
  run::RunReport r = Report({main, Trial(scenario::Outcome::kPassed, 2, 100, "control 1")});
  r.scenario.data.source = scenario::DataSource::kReal;
  r.scenario.controls = {{"data.source=synthetic_boxes"}};
  r.scenario.expect.outcome = scenario::Outcome::kDiverged;
  r.scenario.expect.data_dependent = true;
  run::decide_run(r, 1, 0);
  ASSERT_TRUE(r.data_dependent.has_value());
  EXPECT_TRUE(*r.data_dependent) << r.data_dependent_reason;
  EXPECT_TRUE(r.expectation_met);
}

TEST(RunVerdict, AnInterruptedRunIsUnresolvedAndComparesNothing) {
  // Stopped after the first of two processes: only the main trial exists.
  run::RunReport r = Report({Trial(scenario::Outcome::kPassed, 1, 100)});
  r.scenario.expect.deterministic = true;
  run::decide_run(r, 2, SIGINT);
  EXPECT_EQ(r.outcome, scenario::Outcome::kUnresolved);
  EXPECT_FALSE(r.determinism.checked);
  EXPECT_NE(r.failure.message.find("interrupted by SIGINT before the run finished (1 trial(s) started)"),
            std::string::npos)
      << r.failure.message;
  EXPECT_FALSE(r.expectation_met);
}

TEST(RunVerdict, NoTrialIsABugInTheCaller) {
  run::RunReport r;
  EXPECT_THROW(run::decide_run(r, 1, 0), std::logic_error);
}

// The settings line says how many steps run: a replay that stops early
// (train.stop_after) says so, never the schedule's length alone.
TEST(SettingsText, SaysHowManyStepsRunOfTheSchedule) {
  scenario::Scenario s;
  s.train.max_steps = 20;
  EXPECT_NE(report::settings_text(s).find(", 20 steps, "), std::string::npos) << report::settings_text(s);
  s.train.stop_after = 6;
  EXPECT_NE(report::settings_text(s).find(", 6 of 20 steps, "), std::string::npos) << report::settings_text(s);
  s.train.stop_after = 20;
  EXPECT_NE(report::settings_text(s).find(", 20 steps, "), std::string::npos) << report::settings_text(s);
}

}  // namespace
}  // namespace dbh::harness
