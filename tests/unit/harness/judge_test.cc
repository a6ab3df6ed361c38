// Note [One judge]: every expect key judged by one function over values,
// without a process.

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/scenario/scenario.h"
#include "harness/supervisor/judge.h"
#include "harness/supervisor/outcome.h"

namespace dbh::harness {
namespace {

constexpr int64_t kMiB = 1024 * 1024;

supervisor::Evidence Diverged(const std::string& module, int64_t step) {
  supervisor::Evidence ev;
  ev.outcome = scenario::Outcome::kDiverged;
  ev.failure_class = "nonfinite_gradient";
  ev.failure_step = step;
  ev.failure_module = module;
  ev.peak_memory_bytes = 512 * kMiB;
  return ev;
}

// Note [An unknown is no zero]: no memory figure is no evidence of fitting.
TEST(Judge, AnUnknownPeakMeetsNoMemoryBound) {
  scenario::Expectation e;
  e.outcome = scenario::Outcome::kPassed;
  e.max_peak_memory = 256 * kMiB;
  supervisor::Evidence ev;
  ev.outcome = scenario::Outcome::kPassed;
  const supervisor::Judgement j = judge(e, ev);
  EXPECT_EQ(j.verdict, supervisor::ExpectVerdict::kNotMet);
  ASSERT_EQ(j.why.size(), 1u);
  EXPECT_NE(j.why[0].find("got no memory figure from the worker"), std::string::npos) << j.why[0];
  ev.peak_memory_bytes = 0;
  EXPECT_EQ(judge(e, ev).verdict, supervisor::ExpectVerdict::kMet) << "a measured 0 is a figure";
}

supervisor::Evidence Passed() {
  supervisor::Evidence ev;
  ev.outcome = scenario::Outcome::kPassed;
  ev.peak_memory_bytes = 100 * kMiB;
  return ev;
}

TEST(Judge, MatchingExpectationHasNoMismatches) {
  scenario::Expectation e;
  e.outcome = scenario::Outcome::kDiverged;
  e.failure_class = "nonfinite_gradient";
  e.step = 0;
  e.module = "head.thresh.up2";
  e.max_peak_memory = 1024 * kMiB;
  const supervisor::Judgement j = judge(e, Diverged("head.thresh.up2", 0));
  EXPECT_EQ(j.verdict, supervisor::ExpectVerdict::kMet);
  EXPECT_TRUE(j.met());
  EXPECT_TRUE(j.why.empty());
}

TEST(Judge, ModuleMatchesByDottedPrefix) {
  scenario::Expectation e;
  e.outcome = scenario::Outcome::kDiverged;
  e.module = "head";
  EXPECT_TRUE(judge(e, Diverged("head", 0)).met());
  EXPECT_TRUE(judge(e, Diverged("head.thresh.up2", 0)).met());
  EXPECT_FALSE(judge(e, Diverged("header.conv", 0)).met());  // not a component prefix
  EXPECT_FALSE(judge(e, Diverged("encoder.head", 0)).met());
  e.module = "head.thresh";
  EXPECT_TRUE(judge(e, Diverged("head.thresh.up2", 0)).met());
  EXPECT_FALSE(judge(e, Diverged("head", 0)).met());  // less specific than expected
  EXPECT_EQ(judge(e, Diverged("", 0)).why, std::vector<std::string>{"module: expected head.thresh, got none"});
}

TEST(Judge, EachMismatchHasItsOwnLineInTheTablesOrder) {
  scenario::Expectation e;
  e.outcome = scenario::Outcome::kFailed;
  e.failure_class = "cudnn_execution_failed";
  e.step = 2;
  e.module = "decoder.fusion";
  e.max_peak_memory = 256 * kMiB;
  e.deterministic = true;
  e.data_dependent = true;
  supervisor::Evidence ev = Diverged("head.binarize", 1);
  ev.identical = false;
  const supervisor::Judgement j = judge(e, ev);
  EXPECT_EQ(j.verdict, supervisor::ExpectVerdict::kNotMet);
  EXPECT_EQ(j.why, (std::vector<std::string>{
                       "outcome: expected failed, got diverged",
                       "failure_class: expected cudnn_execution_failed, got nonfinite_gradient",
                       "step: expected 2, got 1",
                       "module: expected decoder.fusion, got head.binarize",
                       "max_peak_memory: expected at most 256.0 MiB, got 512.0 MiB",
                       "deterministic: expected true, got false",
                       "data_dependent: expected true, got undecided",
                   }));
  // Against a passed run, the failure fields say "none".
  e.deterministic.reset();
  e.data_dependent.reset();
  EXPECT_EQ(judge(e, Passed()).why, (std::vector<std::string>{
                                        "outcome: expected failed, got passed",
                                        "failure_class: expected cudnn_execution_failed, got none",
                                        "step: expected 2, got none",
                                        "module: expected decoder.fusion, got none",
                                    }));
}

TEST(Judge, UnsetKeysAreNotChecked) {
  scenario::Expectation e;
  e.outcome = scenario::Outcome::kDiverged;
  EXPECT_TRUE(judge(e, Diverged("anything", 99)).met());
  EXPECT_TRUE(judge(scenario::Expectation{}, Passed()).met());  // outcome defaults to passed
}

TEST(Judge, MetricsAgainstValidationLossAndMemory) {
  scenario::Expectation e;
  e.min_hmean = 0.5;
  e.loss_drop = 0.25;
  supervisor::Evidence ev = Passed();
  EXPECT_EQ(judge(e, ev).why, (std::vector<std::string>{
                                  "min_hmean: expected at least 0.500, got no evaluation",
                                  "loss_drop: expected the loss to fall by at least 25.0 %, got too few steps to tell",
                              }));
  supervisor::EvalRecord last;
  last.step = 8;
  last.hmean = 0.25;
  ev.last_eval = last;
  ev.loss_drop = 0.1;
  EXPECT_EQ(judge(e, ev).why, (std::vector<std::string>{
                                  "min_hmean: expected at least 0.500, got 0.250 after step 7",
                                  "loss_drop: expected the loss to fall by at least 25.0 %, got 10.0 %",
                              }));
  ev.last_eval->hmean = 0.5;  // at least: the bound itself meets it
  ev.loss_drop = 0.25;
  EXPECT_TRUE(judge(e, ev).met());
}

TEST(Judge, DeterminismAndDataDependence) {
  scenario::Expectation e;
  e.deterministic = false;
  supervisor::Evidence ev = Passed();
  EXPECT_EQ(judge(e, ev).why,
            std::vector<std::string>{"deterministic: expected a comparison of fresh processes, got none"});
  ev.identical = false;
  EXPECT_TRUE(judge(e, ev).met());
  e = scenario::Expectation{};
  e.data_dependent = false;
  ev.data_dependent = true;
  EXPECT_EQ(judge(e, ev).why, std::vector<std::string>{"data_dependent: expected false, got true"});
  ev.data_dependent = false;
  EXPECT_TRUE(judge(e, ev).met());
}

// A run this machine could not run is neither met nor refuted, unless the
// scenario expected the skip; an interrupted run is never met.
TEST(Judge, ASkipIsNotJudgedAndAnInterruptionIsNotMet) {
  scenario::Expectation e;
  e.min_hmean = 0.9;
  supervisor::Evidence ev;
  ev.outcome = scenario::Outcome::kSkipped;
  ev.skip_reason = "device \"cuda\" requested, but no CUDA device is available";
  const supervisor::Judgement skipped = judge(e, ev);
  EXPECT_EQ(skipped.verdict, supervisor::ExpectVerdict::kNotJudged);
  EXPECT_FALSE(skipped.met());
  EXPECT_EQ(skipped.why, std::vector<std::string>{"not judged: " + ev.skip_reason});
  scenario::Expectation skip;
  skip.outcome = scenario::Outcome::kSkipped;
  EXPECT_TRUE(judge(skip, ev).met());

  supervisor::Evidence stopped = Passed();
  stopped.interrupted_by = "SIGINT";
  const supervisor::Judgement j = judge(scenario::Expectation{}, stopped);
  EXPECT_EQ(j.verdict, supervisor::ExpectVerdict::kNotMet);
  EXPECT_EQ(j.why, std::vector<std::string>{"interrupted by SIGINT: the run did not finish"});
  EXPECT_EQ(to_string(supervisor::ExpectVerdict::kNotJudged), "not judged");
}

// A bisection probe judges the metric keys only: the outcome and the
// failure's place are what it searches for, not what it judges.
TEST(Judge, TheMetricScopeJudgesOnlyMetricKeys) {
  scenario::Expectation e;
  e.outcome = scenario::Outcome::kDiverged;
  e.step = 3;
  e.max_peak_memory = 256 * kMiB;
  supervisor::Evidence ev = Passed();
  ev.peak_memory_bytes = 512 * kMiB;
  EXPECT_EQ(judge(e, ev, supervisor::ExpectScope::kMetrics).why,
            std::vector<std::string>{"max_peak_memory: expected at most 256.0 MiB, got 512.0 MiB"});
  ev.peak_memory_bytes = 128 * kMiB;
  EXPECT_TRUE(judge(e, ev, supervisor::ExpectScope::kMetrics).met());
  EXPECT_FALSE(judge(e, ev).met());
  std::set<std::string> metrics;
  for (const auto& k : supervisor::expect_keys()) {
    if (k.metric) metrics.insert(k.name);
  }
  EXPECT_EQ(metrics, (std::set<std::string>{"min_hmean", "loss_drop", "max_peak_memory"}));
}

// Every key the resolved scenario writes under `expect` has a row, and every
// row is a key the loader reads (a key judged nowhere, or a row nobody can
// set, fails here).
TEST(Judge, EveryExpectKeyHasOneRow) {
  scenario::Scenario s;
  s.expect.failure_class = "x";
  s.expect.step = 1;
  s.expect.module = "m";
  s.expect.deterministic = true;
  s.expect.max_peak_memory = 1;
  s.expect.data_dependent = true;
  s.expect.min_hmean = 0.5;
  s.expect.loss_drop = 0.5;
  std::set<std::string> written;
  const auto resolved = nlohmann::json::parse(scenario::resolved_json(s));
  for (const auto& [k, v] : resolved.at("expect").items()) written.insert(k);
  std::set<std::string> rows;
  for (const auto& k : supervisor::expect_keys()) EXPECT_TRUE(rows.insert(k.name).second) << "two rows for " << k.name;
  EXPECT_EQ(rows, written);
}

}  // namespace
}  // namespace dbh::harness

namespace dbh::harness {
namespace {

const std::vector<std::vector<std::string>> kSynthetic = {{"data.source=synthetic_boxes"}};

// The controls' answer: a failure that passes on other data depends on the
// data; one that a control shares does not; one that passes with other keys
// depends on those keys; a passed run needs no answer.
TEST(ControlsAnswer, DataDependenceFromTheControlsOutcomes) {
  const supervisor::ControlsAnswer data = supervisor::controls_answer(scenario::Outcome::kCrashed, {scenario::Outcome::kPassed}, kSynthetic, "real /d");
  EXPECT_EQ(data.data_dependent, true);
  EXPECT_EQ(data.reason,
            "The same training passed with data.source=synthetic_boxes and failed with the scenario's data (real /d): "
            "the failure depends on the data, not on the model, trainer or device.");
  EXPECT_EQ(data.evidence, data.reason);

  const supervisor::ControlsAnswer both = supervisor::controls_answer(scenario::Outcome::kCrashed, {scenario::Outcome::kCrashed}, kSynthetic, "real /d");
  EXPECT_EQ(both.data_dependent, false);
  EXPECT_EQ(both.reason,
            "The control run with data.source=synthetic_boxes failed too: the failure does not depend on it.");

  const supervisor::ControlsAnswer keys =
      supervisor::controls_answer(scenario::Outcome::kDiverged, {scenario::Outcome::kPassed, scenario::Outcome::kPassed},
                      {{"train.lr=0.001"}, {"train.precision=fp32", "train.grad_clip=1"}}, "real /d");
  EXPECT_EQ(keys.data_dependent, false);
  EXPECT_EQ(keys.reason, "");
  EXPECT_EQ(keys.evidence,
            "A control run with train.lr=0.001, train.precision=fp32, train.grad_clip=1 passed: the failure depends "
            "on these settings");

  // One failing control of two: not data-dependent.
  EXPECT_EQ(supervisor::controls_answer(scenario::Outcome::kCrashed, {scenario::Outcome::kPassed, scenario::Outcome::kFailed},
                            {{"data.path=/other"}, {"train.lr=0.1"}}, "real /d")
                .data_dependent,
            false);
  // A passed run, or no control: nothing decided, nothing said.
  const supervisor::ControlsAnswer passed = supervisor::controls_answer(scenario::Outcome::kPassed, {scenario::Outcome::kCrashed}, kSynthetic, "real /d");
  EXPECT_FALSE(passed.data_dependent.has_value());
  EXPECT_TRUE(passed.reason.empty() && passed.evidence.empty());
  EXPECT_FALSE(supervisor::controls_answer(scenario::Outcome::kCrashed, {}, {}, "real /d").data_dependent.has_value());
  // A skipped control is no failure (it says nothing against the data).
  EXPECT_EQ(supervisor::controls_answer(scenario::Outcome::kCrashed, {scenario::Outcome::kSkipped}, kSynthetic, "real /d").data_dependent, true);
}

}  // namespace
}  // namespace dbh::harness
