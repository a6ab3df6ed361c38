// Note [The trial sequence]: the trials of a run, in order, each in its
// folder, followed by an observer and decided — with a stand-in worker (a
// short Python script speaking the event protocol), no model.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "harness/common/error.h"
#include "harness/run/trials.h"
#include "harness/scenario/scenario.h"
#include "tests/support/files.h"

namespace dbh::harness {
namespace {

namespace fs = std::filesystem;

// Four steps; the loss is the scenario's learning rate, NaN at step 2 when
// it is above 1 (the worker says it diverged).
constexpr const char* kWorker = R"(#!/usr/bin/env python3
import json, math, os, struct, sys
w = lambda e: os.write(3, (json.dumps(e) + '\n').encode())
w({'type': 'hello', 't': 0, 'schema_version': 1, 'pid': os.getpid(), 'scenario_hash': os.environ['DBH_SCENARIO_HASH'],
   'capabilities': ['loss_bits', 'monitors.finite'], 'modules': ['m'], 'worker': 'stand-in 1'})
if os.environ.get('DBH_WORKER_DESCRIBE') == '1':
    w({'type': 'done', 't': 0, 'status': 'described'}); sys.exit(0)
lr = json.load(open(os.environ['DBH_SCENARIO']))['train']['lr']
w({'type': 'run_begin', 't': 0, 'run': 0, 'memory': {}})
for s in range(4):
    w({'type': 'step_begin', 't': 0, 'run': 0, 'step': s})
    if lr > 1 and s == 2:
        w({'type': 'error', 't': 0, 'kind': 'diverged', 'run': 0, 'step': s, 'message': 'loss is nan'})
        w({'type': 'done', 't': 0, 'status': 'diverged'}); sys.exit(1)
    bits = struct.unpack('<I', struct.pack('<f', lr))[0]
    w({'type': 'step_end', 't': 0, 'run': 0, 'step': s, 'loss': lr, 'loss_bits': bits, 'lr': lr})
w({'type': 'run_end', 't': 0, 'run': 0, 'steps': 4, 'checksum': '0', 'memory': {}})
w({'type': 'done', 't': 0, 'status': 'passed'})
)";

// What the observer saw, in order.
class Recorder : public run::TrialObserver {
 public:
  void trial_started(const std::string& label, const scenario::Scenario&) override { seen.push_back("start " + label); }
  void trial_event(const proto::Event&) override { ++events; }
  void trial_finished(const run::TrialRecord& t) override { seen.push_back("end " + t.label); }
  std::vector<std::string> seen;
  int events = 0;
};

class TrialsTest : public ::testing::Test {
 protected:
  // A scenario of the stand-in worker with `more` lines.
  fs::path scenario(const std::string& more) const {
    testing::write_text(dir_ / "w.py", kWorker);
    const fs::path path = dir_ / "s.yaml";
    testing::write_text(path, "name: trials\nworker:\n  command: [python3, " + (dir_ / "w.py").string() +
                                  "]\ndata: {source: real}\ntrain: {max_steps: 4, lr: 0.5}\n"
                                  "limits: {deadline_s: 60, silence_s: 30, grace_s: 1}\n" + more);
    return path;
  }

  run::RunReport run(const fs::path& path, const std::vector<std::string>& overrides, run::TrialSettings settings = {}) {
    return run::run_trials(scenario::load_scenario(path.string(), overrides), path.string(), overrides,
                           (dir_ / "out").string(), settings, recorder_);
  }

  testing::ScratchDir dir_{"dbh-trials"};
  Recorder recorder_;
};

TEST_F(TrialsTest, ProcessesThenControlsEachInItsFolderAndDecided) {
  const fs::path path = scenario("repeat: {processes: 2}\ncontrols: [[train.lr=2]]\nexpect: {outcome: passed}\n");
  const run::RunReport r = run(path, {});
  ASSERT_EQ(r.trials.size(), 3u);
  EXPECT_EQ(recorder_.seen, (std::vector<std::string>{"start process 1", "end process 1", "start process 2",
                                                       "end process 2", "start control 1", "end control 1"}));
  EXPECT_GT(recorder_.events, 3 * 4);
  EXPECT_EQ(fs::path(r.trials[1].dir).filename(), "process-2");
  EXPECT_EQ(fs::path(r.trials[2].dir).filename(), "control-1");
  EXPECT_TRUE(fs::exists(fs::path(r.trials[2].dir) / "events.jsonl"));
  EXPECT_EQ(r.trials[2].overrides, (std::vector<std::string>{"train.lr=2"}));
  EXPECT_EQ(r.trials[2].analysis.outcome, scenario::Outcome::kDiverged);
  // Decided: the processes compared, the expectation judged.
  EXPECT_EQ(r.outcome, scenario::Outcome::kPassed);
  EXPECT_TRUE(r.determinism.checked);
  EXPECT_TRUE(r.determinism.identical);
  EXPECT_TRUE(r.expectation_met);
  EXPECT_EQ(r.stopped, 0);
  ASSERT_GE(r.repro_words.size(), 3u);
  EXPECT_EQ(r.repro_words[1], "run");
  EXPECT_NE(r.repro_command.find("s.yaml"), std::string::npos) << r.repro_command;
}

TEST_F(TrialsTest, TheRunsOverridesReachEveryTrialAndTheRepro) {
  const fs::path path = scenario("controls: [[train.max_steps=4]]\n");
  const run::RunReport r = run(path, {"train.lr=3"});
  ASSERT_EQ(r.trials.size(), 2u);
  EXPECT_EQ(r.trials[0].analysis.outcome, scenario::Outcome::kDiverged);
  EXPECT_EQ(r.trials[1].analysis.outcome, scenario::Outcome::kDiverged) << "the control keeps train.lr=3";
  EXPECT_EQ(r.repro_words.back(), "train.lr=3");
}

TEST_F(TrialsTest, ATrialTheDiskCouldNotHoldIsNeverAnOutcome) {
  const fs::path path = scenario("controls: [[train.lr=2]]\n");
  run::TrialSettings settings;
  settings.infrastructure_failure = [](const std::vector<std::string>&) { return std::string("disk full"); };
  try {
    run(path, {}, settings);
    FAIL() << "expected ReportError";
  } catch (const ReportError& e) {
    EXPECT_NE(std::string(e.what()).find("main: disk full"), std::string::npos) << e.what();
  }
  EXPECT_EQ(recorder_.seen, (std::vector<std::string>{"start main", "end main"})) << "no trial after it";
}

}  // namespace
}  // namespace dbh::harness
