// Silent failures on the supervisor side and in the scenario layer: how the
// silent-failure monitors' health events become a failed outcome with class,
// step and evidence; the loss-not-decreasing judgement over step_end events
// (when it judges, when it must not); the `monitors:` keys; the silent faults'
// catalog entries, schedules and placement checks.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "harness/common/error.h"
#include "harness/scenario/fault_catalog.h"
#include "harness/proto/event_types.h"
#include "harness/proto/events.h"
#include "harness/kb/knowledge_base.h"
#include "harness/scenario/scenario.h"
#include "harness/supervisor/outcome.h"
#include "harness/supervisor/trial.h"
#include "tests/support/recorded_trial.h"

namespace dbh::harness {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

proto::Event Ev(const std::string& type, json fields = json::object()) {
  return proto::decode_event(proto::encode_event(type, std::move(fields), 0.5), "test");
}

// A worker's event stream: hello, run_begin, steps with the given losses,
// then either a silent finding or a normal end.
class Stream {
 public:
  Stream() {
    proto::Hello hello;
    hello.pid = 1;
    hello.scenario_hash = testing::kTheScenarioHash;
    add(hello);
    add(proto::RunBegin{0, {}});
  }
  /// A raw event: fields the typed ones do not write, or leave out.
  Stream& add(const std::string& type, json fields = json::object()) {
    r_.events.push_back(Ev(type, std::move(fields)));
    return *this;
  }
  template <typename E, typename = decltype(E::kType)>
  Stream& add(const E& e) {
    return add(E::kType, to_json(e));
  }
  Stream& steps(const std::vector<double>& losses, int64_t run = 0) {
    for (size_t i = 0; i < losses.size(); ++i) {
      const auto s = static_cast<int64_t>(i);
      add(proto::StepBegin{run, s});
      proto::StepEnd end;
      end.run = run;
      end.step = s;
      end.loss = losses[i];
      end.lr = 0.007;
      end.grad_norm = 3.0;
      add(end);
    }
    return *this;
  }
  Stream& finish(int64_t steps, int64_t run = 0) {
    add(proto::RunEnd{run, steps, "c", {}, {}});
    add(proto::Done{"passed", {}});
    r_.result.exit_code = 0;
    return *this;
  }
  testing::RecordedTrial& result() { return r_; }

 private:
  testing::RecordedTrial r_;
};

const kb::KnowledgeBase& Kb() {
  const kb::KnowledgeBase& kb = kb::KnowledgeBase::shipped();
  EXPECT_FALSE(kb.classes().empty()) << "reports/kb/failures.yaml was not found";
  return kb;
}

scenario::Scenario Steps(int64_t max_steps, int64_t window = -1) {
  scenario::Scenario s;
  s.train.max_steps = max_steps;
  s.monitors.learning_window = window;
  return s;
}

std::vector<double> Flat(size_t n, double value = 0.5) {
  return std::vector<double>(n, value);
}

std::vector<double> Falling(size_t n) {
  std::vector<double> v;
  for (size_t i = 0; i < n; ++i)
    v.push_back(1.0 / (1.0 + 0.1 * static_cast<double>(i)));
  return v;
}

// --- the knowledge base ----------------------------------------------------------

TEST(SilentKnowledgeBase, HasEveryNewClassWithCausesAndResolutions) {
  for (const char* id : {"input_denormalised", "labels_degenerate", "predictions_collapsed", "not_learning"}) {
    const kb::FailureClass* c = Kb().find(id);
    ASSERT_NE(c, nullptr) << id << " is missing from reports/kb/failures.yaml";
    EXPECT_FALSE(c->title.empty()) << id;
    EXPECT_FALSE(c->events.empty()) << id;
    EXPECT_GE(c->causes.size(), 2u) << id;
    EXPECT_GE(c->resolutions.size(), 2u) << id;
  }
  const auto classes = scenario::known_failure_classes();
  EXPECT_NE(std::find(classes.begin(), classes.end(), "not_learning"), classes.end());
}

// --- silent health events → failed ----------------------------------------------

TEST(SilentClassify, HealthFindingIsAFailureWithItsClassStepAndEvidence) {
  Stream st;
  st.steps({0.9, 0.8, 0.7});
  st.add(proto::StepBegin{0, 3});
  const std::vector<std::string> evidence = {"input mean 0.000 (all 2 images black after de-normalisation) at step 3",
                                             "de-normalised mean / min / max per image: a 0.0 / 0.0 / 0.0"};
  proto::Health h;
  h.step = 3;
  h.check = "input_denormalised";
  h.kind = "input";
  h.site = "image";
  h.module = "";
  h.primary = true;
  h.message = "input black after de-normalisation at step 3";
  h.evidence = evidence;
  st.add(h);
  proto::WorkerError error;
  error.kind = "silent";
  error.run = 0;
  error.step = 3;
  error.message = "input black";
  error.module = "head.binarize";
  st.add(error);
  st.add(proto::Done{"failed", {}});
  st.result().result.exit_code = 1;
  const supervisor::TrialAnalysis a = testing::classify(st.result(), Steps(10, 0), Kb());
  EXPECT_EQ(a.outcome, scenario::Outcome::kFailed) << "a silent finding is a failure, not a divergence";
  EXPECT_EQ(a.failure.klass, "input_denormalised");
  ASSERT_TRUE(a.failure.step.has_value());
  EXPECT_EQ(*a.failure.step, 3);
  EXPECT_EQ(a.failure.module, "") << "a silent finding names no module";
  EXPECT_EQ(a.failure.message, "input black after de-normalisation at step 3");
  EXPECT_EQ(a.failure.evidence, evidence);
  EXPECT_EQ(a.steps_completed, 3);
  EXPECT_EQ(a.primary_health.value("check", ""), "input_denormalised");
}

TEST(SilentClassify, EachSilentCheckIsItsOwnClass) {
  for (const char* check : {"input_denormalised", "labels_degenerate", "predictions_collapsed"}) {
    Stream st;
    st.steps({0.9});
    proto::Health h;
    h.step = 1;
    h.check = check;
    h.primary = true;
    h.message = "m";
    h.evidence = std::vector<std::string>{"e"};
    st.add(h);
    st.add(proto::Done{"failed", {}});
    st.result().result.exit_code = 1;
    const supervisor::TrialAnalysis a = testing::classify(st.result(), Steps(5, 0), Kb());
    EXPECT_EQ(a.outcome, scenario::Outcome::kFailed) << check;
    EXPECT_EQ(a.failure.klass, check);
  }
}

TEST(SilentClassify, AFiniteFailureTakesPrecedence) {
  Stream st;
  st.steps({0.9});
  proto::Health finite;
  finite.step = 1;
  finite.check = "finite";
  finite.kind = "activation";
  finite.site = "decoder.fusion";
  finite.module = "decoder.fusion";
  finite.primary = true;
  finite.mode = "cheap";
  st.add(finite);
  proto::Health collapsed;
  collapsed.step = 1;
  collapsed.check = "predictions_collapsed";
  collapsed.primary = true;
  collapsed.message = "m";
  st.add(collapsed);
  st.add(proto::Done{"diverged", {}});
  st.result().result.exit_code = 1;
  const supervisor::TrialAnalysis a = testing::classify(st.result(), Steps(5, 0), Kb());
  EXPECT_EQ(a.outcome, scenario::Outcome::kDiverged);
  EXPECT_EQ(a.failure.klass, "nonfinite_activation");
}

// --- loss not decreasing -----------------------------------------------------------

TEST(NotLearning, FlatLossOverTheWindowFailsWithEvidence) {
  Stream st;
  auto losses = Flat(12, 0.512);
  losses[7] = 0.511;
  st.steps(losses).finish(12);
  const supervisor::TrialAnalysis a = testing::classify(st.result(), Steps(12, 12), Kb());
  EXPECT_EQ(a.outcome, scenario::Outcome::kFailed);
  EXPECT_EQ(a.failure.klass, "not_learning");
  ASSERT_TRUE(a.failure.step.has_value());
  EXPECT_EQ(*a.failure.step, 11) << "the window's last step";
  ASSERT_FALSE(a.failure.evidence.empty());
  EXPECT_NE(a.failure.evidence[0].find("loss 0.512 → 0.512 over steps 0–11"), std::string::npos)
      << a.failure.evidence[0];
  EXPECT_NE(a.failure.evidence[0].find("expected at least −5.0 %"), std::string::npos) << a.failure.evidence[0];
  EXPECT_NE(a.failure.message.find("loss not decreasing over steps 0–11"), std::string::npos) << a.failure.message;
}

TEST(NotLearning, FallingLossPasses) {
  Stream st;
  st.steps(Falling(12)).finish(12);
  const supervisor::TrialAnalysis a = testing::classify(st.result(), Steps(12, 12), Kb());
  EXPECT_EQ(a.outcome, scenario::Outcome::kPassed) << a.failure.message;
}

TEST(NotLearning, TheMarginDecides) {
  // 0.500 → 0.480: −4 %.
  std::vector<double> losses = Flat(6, 0.5);
  for (double x : Flat(6, 0.48))
    losses.push_back(x);
  Stream st;
  st.steps(losses).finish(12);
  scenario::Scenario s = Steps(12, 12);
  EXPECT_EQ(testing::classify(st.result(), s, Kb()).failure.klass, "not_learning");
  s.monitors.learning_min_drop = 0.03;
  EXPECT_EQ(testing::classify(st.result(), s, Kb()).outcome, scenario::Outcome::kPassed);
}

// Note [Learning judged with its noise]: a 6 % fall of a loss that jumps
// ±15 % from one step to the next is noise, not learning; the same fall of a
// steady loss is learning.
TEST(NotLearning, AFallInsideTheStepToStepSpreadIsNotLearning) {
  std::vector<double> noisy;
  for (int i = 0; i < 12; ++i) noisy.push_back((i < 6 ? 1.0 : 0.94) + (i % 2 == 0 ? 0.15 : -0.15));
  Stream st;
  st.steps(noisy).finish(12);
  const supervisor::TrialAnalysis a = testing::classify(st.result(), Steps(12, 12), Kb());
  EXPECT_EQ(a.failure.klass, "not_learning") << a.failure.message;
  ASSERT_GE(a.failure.evidence.size(), 3u);
  EXPECT_NE(a.failure.message.find("step-to-step spread"), std::string::npos) << a.failure.message;
  EXPECT_NE(a.failure.evidence[2].find("spread"), std::string::npos) << a.failure.evidence[2];

  std::vector<double> steady;
  for (int i = 0; i < 12; ++i) steady.push_back((i < 6 ? 1.0 : 0.94) + (i % 2 == 0 ? 0.001 : -0.001));
  Stream st2;
  st2.steps(steady).finish(12);
  EXPECT_EQ(testing::classify(st2.result(), Steps(12, 12), Kb()).outcome, scenario::Outcome::kPassed);
}

TEST(NotLearning, ShortRunsAreNotJudged) {
  // A flat loss over fewer steps than the window: not judged.
  Stream st;
  st.steps(Flat(8)).finish(8);
  EXPECT_EQ(testing::classify(st.result(), Steps(8, 12), Kb()).outcome, scenario::Outcome::kPassed);
  // auto: off below 40 steps (the shipped scenarios run 4–20).
  Stream st2;
  st2.steps(Flat(20)).finish(20);
  EXPECT_EQ(testing::classify(st2.result(), Steps(20, -1), Kb()).outcome, scenario::Outcome::kPassed);
}

TEST(NotLearning, AutoJudgesLongRunsFromScratchOnly) {
  Stream st;
  st.steps(Flat(40)).finish(40);
  const supervisor::TrialAnalysis a = testing::classify(st.result(), Steps(40, -1), Kb());
  EXPECT_EQ(a.failure.klass, "not_learning");
  ASSERT_TRUE(a.failure.step.has_value());
  EXPECT_EQ(*a.failure.step, 19) << "auto window: min(50, max_steps/2) = 20 steps";
  ASSERT_GE(a.failure.evidence.size(), 3u);
  EXPECT_NE(a.failure.evidence[2].find("auto"), std::string::npos) << a.failure.evidence[2];

  scenario::Scenario from_weights = Steps(40, -1);
  from_weights.model.weights = "/some/trained.pt";
  EXPECT_EQ(testing::classify(st.result(), from_weights, Kb()).outcome, scenario::Outcome::kPassed);
  scenario::Scenario resumed = Steps(40, -1);
  resumed.train.resume_from = "/some/checkpoint.pt";
  EXPECT_EQ(testing::classify(st.result(), resumed, Kb()).outcome, scenario::Outcome::kPassed);
  scenario::Scenario off = Steps(40, 0);
  EXPECT_EQ(testing::classify(st.result(), off, Kb()).outcome, scenario::Outcome::kPassed);
  scenario::Scenario silent_off = Steps(40, -1);
  silent_off.monitors.silent = {"input", "labels", "predictions"};
  EXPECT_EQ(testing::classify(st.result(), silent_off, Kb()).outcome, scenario::Outcome::kPassed);
}

// Note [Updates that change nothing]: a learning rate of 0, or gradients of
// exactly 0, at every step of a run are not learning however short the run;
// judged only where the worker measured the gradient norm.
TEST(NotLearning, ALearningRateOfZeroOrZeroGradientsAtEveryStepChangeNothing) {
  const auto trial = [](size_t steps, double lr, std::optional<double> grad) {
    Stream st;
    for (size_t i = 0; i < steps; ++i) {
      const auto step = static_cast<int64_t>(i);
      st.add(proto::StepBegin{0, step});
      proto::StepEnd end;
      end.step = step;
      end.loss = 0.5;
      end.lr = lr;
      end.grad_norm = grad;
      st.add(end);
    }
    st.finish(static_cast<int64_t>(steps));
    return testing::classify(st.result(), Steps(static_cast<int64_t>(steps), -1), Kb());
  };
  const auto lr_zero = trial(4, 0.0, 1.5);
  EXPECT_EQ(lr_zero.failure.klass, "not_learning");
  EXPECT_EQ(lr_zero.failure.message, "the learning rate was 0 at every one of the 4 steps of run 0: the weights never changed");
  EXPECT_EQ(lr_zero.failure.step, 0);
  const auto grad_zero = trial(4, 0.01, 0.0);
  EXPECT_EQ(grad_zero.failure.klass, "not_learning");
  EXPECT_NE(grad_zero.failure.message.find("every gradient was zero at each of the 4 steps"), std::string::npos);
  EXPECT_EQ(trial(2, 0.0, 0.0).outcome, scenario::Outcome::kPassed);             // too short to say
  EXPECT_EQ(trial(4, 0.0, std::nullopt).outcome, scenario::Outcome::kPassed);    // no gradient norm measured
  EXPECT_EQ(trial(4, 0.01, 1.5).outcome, scenario::Outcome::kPassed);            // learning
}

TEST(NotLearning, EachInProcessRunIsJudgedOnItsOwn) {
  Stream st;
  st.steps(Falling(12), 0);
  st.add(proto::RunEnd{0, 12, "c", {}, {}});
  st.add(proto::RunBegin{1, {}});
  st.steps(Flat(12), 1).finish(12, 1);
  scenario::Scenario two_runs = Steps(12, 12);
  two_runs.repeat.in_process = 2;
  const supervisor::TrialAnalysis a = testing::classify(st.result(), two_runs, Kb());
  EXPECT_EQ(a.failure.klass, "not_learning");
  ASSERT_TRUE(a.failure.run.has_value());
  EXPECT_EQ(*a.failure.run, 1);
}

// --- scenarios: monitors keys, silent faults --------------------------------------

class SilentScenario : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::path(::testing::TempDir()) / "dbh-silent-XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string write(const std::string& text) {
    const fs::path p = dir_ / ("s" + std::to_string(++n_) + ".yaml");
    std::ofstream(p, std::ios::binary) << "name: s\ntrain:\n  max_steps: 6\n" << text;
    return p.string();
  }
  std::string error(const std::string& text) {
    try {
      (void)scenario::load_scenario(write(text));
    } catch (const ScenarioError& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
  int n_ = 0;
};

TEST_F(SilentScenario, MonitorKeysHaveDocumentedDefaults) {
  const scenario::Scenario s = scenario::load_scenario(write(""));
  EXPECT_EQ(s.monitors.silent, (std::vector<std::string>{"input", "labels", "predictions", "learning"}));
  EXPECT_TRUE(s.monitors.silent_check("learning"));
  EXPECT_EQ(s.monitors.collapse_after, 10);
  EXPECT_EQ(s.monitors.collapse_steps, 5);
  EXPECT_DOUBLE_EQ(s.monitors.collapse_margin, 0.02);
  EXPECT_EQ(s.monitors.learning_window, -1);
  EXPECT_DOUBLE_EQ(s.monitors.learning_min_drop, 0.05);
}

TEST_F(SilentScenario, MonitorKeysRoundTripThroughTheResolvedTree) {
  const scenario::Scenario s =
      scenario::load_scenario(write("monitors:\n  silent: false\n  collapse_after: 3\n  collapse_steps: 2\n"
                          "  collapse_margin: 0.1\n  learning_window: 8\n  learning_min_drop: 0.2\n"));
  const scenario::Scenario back = scenario::decode_scenario(parse_yaml(scenario::resolved_json(s), "scenario.resolved.json"), "");
  EXPECT_TRUE(back.monitors.silent.empty());
  EXPECT_FALSE(back.monitors.silent_check("input"));
  EXPECT_EQ(back.monitors.collapse_after, 3);
  EXPECT_EQ(back.monitors.collapse_steps, 2);
  EXPECT_DOUBLE_EQ(back.monitors.collapse_margin, 0.1);
  EXPECT_EQ(back.monitors.learning_window, 8);
  EXPECT_DOUBLE_EQ(back.monitors.learning_min_drop, 0.2);
  const scenario::Scenario some = scenario::load_scenario(write("monitors:\n  silent: [labels, learning]\n"));
  EXPECT_EQ(some.monitors.silent, (std::vector<std::string>{"labels", "learning"}));
  EXPECT_EQ(scenario::decode_scenario(parse_yaml(scenario::resolved_json(some), "scenario.resolved.json"), "").monitors.silent,
            some.monitors.silent);
  const scenario::Scenario off = scenario::load_scenario(write("monitors:\n  mode: off\n"));
  EXPECT_FALSE(off.monitors.silent_check("labels")) << "mode off turns every check off";
  const scenario::Scenario autow = scenario::load_scenario(write("monitors:\n  learning_window: auto\n"));
  EXPECT_EQ(autow.monitors.learning_window, -1);
  EXPECT_NE(scenario::resolved_json(autow).find("\"learning_window\": \"auto\""), std::string::npos) << scenario::resolved_json(autow);
  EXPECT_EQ(scenario::decode_scenario(parse_yaml(scenario::resolved_json(autow), "scenario.resolved.json"), "").monitors.learning_window,
            -1);
}

TEST_F(SilentScenario, BadMonitorValuesSayWhatWasExpected) {
  EXPECT_NE(error("monitors:\n  learning_window: 3\n")
                .find("monitors.learning_window: expected auto, 0 (off) or a number of steps >= 4, got"),
            std::string::npos);
  EXPECT_NE(error("monitors:\n  learning_window: often\n").find("monitors.learning_window: expected auto"),
            std::string::npos);
  EXPECT_NE(error("monitors:\n  silent: [labels, predictons]\n")
                .find("monitors.silent: expected one of input, labels, predictions, learning, got \"predictons\" "
                      "(did you mean \"predictions\"?)"),
            std::string::npos);
  EXPECT_NE(error("monitors:\n  collapse_margin: 0.7\n").find("monitors.collapse_margin: expected a number > 0"),
            std::string::npos);
  EXPECT_NE(error("monitors:\n  collapse_steps: 0\n").find("monitors.collapse_steps: expected an integer in [1,"),
            std::string::npos);
}

TEST_F(SilentScenario, SilentFaultsAreCataloguedAndFireFromAtStepOn) {
  for (const char* name :
       {"label_shift", "label_scale", "wrong_normalisation", "lr_freeze", "label_swap", "all_dont_care"}) {
    const scenario::FaultSpec* spec = scenario::find_fault(name);
    ASSERT_NE(spec, nullptr) << name;
    EXPECT_TRUE(spec->from_at_step_on) << name;
    EXPECT_FALSE(spec->help.empty()) << name;
  }
  const scenario::Scenario s =
      scenario::load_scenario(write("faults:\n  - name: lr_freeze\n    at_step: 2\n"
                          "  - name: wrong_normalisation\n    kind: saturated\n    at_step: 1\n"
                          "    until_step: 3\n  - name: lr_spike\n    at_step: 2\n"));
  EXPECT_FALSE(s.faults[0].fires_at(1, 0));
  EXPECT_TRUE(s.faults[0].fires_at(2, 0));
  EXPECT_TRUE(s.faults[0].fires_at(5, 0)) << "a silent fault without until_step stays on";
  EXPECT_TRUE(s.faults[1].fires_at(3, 0));
  EXPECT_FALSE(s.faults[1].fires_at(4, 0)) << "until_step still ends it";
  EXPECT_EQ(s.faults[1].get("kind"), "saturated");
  EXPECT_FALSE(s.faults[2].fires_at(3, 0)) << "other faults keep at_step only";
  EXPECT_NE(error("faults:\n  - name: wrong_normalisation\n    kind: grey\n")
                .find("faults[0].kind: expected one of black, saturated, unnormalised"),
            std::string::npos);
}

TEST_F(SilentScenario, SilentFaultsThatCannotActAreRefused) {
  EXPECT_NE(error("data:\n  batch_size: 1\nfaults:\n  - name: label_swap\n")
                .find("faults[0]: expected label_swap with data.batch_size >= 2"),
            std::string::npos);
  EXPECT_EQ(error("data:\n  batch_size: 2\nfaults:\n  - name: label_swap\n"), "");
  EXPECT_NE(error("faults:\n  - name: label_shift\n    dx: 0\n    dy: 0\n").find("expected a shift other than"),
            std::string::npos);
  EXPECT_NE(error("data:\n  size: 64\nfaults:\n  - name: label_shift\n    dx: 65\n")
                .find("faults[0].dx: expected a shift of at most data.size (64) pixels, got 65"),
            std::string::npos);
  EXPECT_NE(error("faults:\n  - name: label_scale\n    factor: 1\n").find("faults[0].factor: expected a factor > 0"),
            std::string::npos);
  EXPECT_NE(error("faults:\n  - name: label_scale\n    factor: -2\n").find("faults[0].factor: expected a factor > 0"),
            std::string::npos);
  EXPECT_NE(error("data:\n  source: synthetic_random\nfaults:\n  - name: all_dont_care\n")
                .find("faults[0]: expected all_dont_care on labels of text"),
            std::string::npos);
  EXPECT_EQ(error("data:\n  source: synthetic_random\nfaults:\n  - name: wrong_normalisation\n"), "")
      << "the input fault acts on any data";
  // An error names the file, line and column.
  const std::string e = error("data:\n  batch_size: 1\nfaults:\n  - name: label_swap\n");
  EXPECT_NE(e.find(".yaml:7:11: faults[0]"), std::string::npos) << e;
}

}  // namespace
}  // namespace dbh::harness
