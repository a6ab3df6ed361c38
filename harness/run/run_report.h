#pragma once
// A run: its trials and what they mean (Note [The run's verdicts],
// run_verdict.h), the value every output of `dbh run` and `dbh suite` is
// written from (report/ writes it; it decides nothing).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/env/environment.h"
#include "harness/scenario/scenario.h"
#include "harness/supervisor/outcome.h"
#include "harness/supervisor/resolutions.h"

namespace dbh::harness::run {

/// One trial of a run: the main trial, a repeat or a control.
struct TrialRecord {
  std::string label;                   // "main", "process 2", "control 1"
  std::vector<std::string> overrides;  // for controls
  std::string dir;                     // its folder under the run folder
  supervisor::TrialAnalysis analysis;
  std::string stderr_tail;
};

/// Comparison of repeated processes (repeat.processes > 1).
struct DeterminismCheck {
  bool checked = false;
  bool identical = true;
  int64_t processes = 0;
  std::optional<int64_t> first_divergent_step;
  std::string detail;      // what differed first
  double pass_rate = 1.0;  // fraction of processes that passed
};

/// Everything a run produced, the input of every report.
struct RunReport {
  scenario::Scenario scenario;
  std::string out_dir;
  std::string started_at;  // ISO 8601
  double seconds = 0;
  env::Environment env;
  std::vector<TrialRecord> trials;  // trials[0] is the main trial
  scenario::Outcome outcome = scenario::Outcome::kUnresolved;
  supervisor::Failure failure;
  DeterminismCheck determinism;
  /// A resolution of the failure's class tried as a control run.
  using ResolutionCheck = ::dbh::harness::supervisor::ResolutionCheck;  // supervisor/resolutions.h
  std::vector<supervisor::ResolutionCheck> resolution_checks;
  std::optional<bool> data_dependent;  // decided from the controls
  std::string data_dependent_reason;
  bool expectation_met = false;
  std::vector<std::string> expectation_why;
  /// The command that reproduces the run (Note [The trial sequence]): its
  /// words, as repro.sh runs them, and the same as one line for bash.
  std::vector<std::string> repro_words;
  std::string repro_command;
  /// The signal that stopped the run (SIGINT, SIGTERM), else 0.
  int stopped = 0;
  /// Note [Input manifest] (probe/probe.h): the hash of everything the run's
  /// outcome depends on, and the outcome variables that were set.
  std::string inputs_manifest;
  std::vector<std::string> outcome_environment;  // NAME=value

  /// Not tried on this machine (Outcome::kSkipped: a device it lacks) and
  /// not expected to be: neither a pass nor a failure, as a skipped test.
  bool not_run_here() const { return outcome == scenario::Outcome::kSkipped && !expectation_met; }
};

/// Note [One verdict]: what every output of a run says of it, from one
/// function: the report's title (report.md, report.html), the command line's
/// PASS/FAIL/SKIP, JUnit, GitHub annotations and job summary, index.html and
/// the suite's totals. A skip is a skip everywhere, never a failure or an
/// error; an unmet expectation is never "passed", whatever the outcome.
enum class RunVerdict { kMet, kNotMet, kSkipped };
RunVerdict verdict_of(const RunReport& r);
/// "met", "not met", "skipped".
std::string to_string(RunVerdict v);

struct VerdictCounts {
  size_t met = 0, not_met = 0, skipped = 0;
};
VerdictCounts count_verdicts(const std::vector<RunReport>& runs);

}  // namespace dbh::harness::run
