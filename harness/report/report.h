#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/env/environment.h"
#include "harness/report/ci_conventions.h"
#include "harness/scenario/scenario.h"
#include "harness/supervisor/outcome.h"
#include "harness/supervisor/resolutions.h"

namespace dbh::harness::report {

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
/// report.json's memory timeline holds a trial's first and last this many
/// steps (`timeline_omitted` counts the rest; metrics.csv has them all).
inline constexpr size_t kJsonTimelineEnds = 200;

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
  std::string repro_command;
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

/// The report's title, the same on every page: the failure ("NaN/Inf in
/// activations in decoder.fusion at step 1"), "Scenario X passed", "Scenario
/// X not run on this machine", or, for an unmet expectation without a
/// failure, "Scenario X: expectation not met (training passed)".
std::string report_title(const RunReport& r);

/// One line for a report's Environment section: the layout and thread count
/// a trial ran with, whether measured, cached, explicit or defaults, and the
/// timings they were chosen from (`TrialAnalysis::tuning`, Note [Measured
/// choices] in supervisor/tuning.h).
std::string measured_choices_line(const nlohmann::json& tuning);

/// One line of a report's Environment section; `literal` when its value must
/// not be read as Markdown (what an external worker said of itself, key
/// names): report.md escapes it (report.html escapes every value).
struct EnvironmentLine {
  std::string key, value;
  bool literal = false;
};
/// The Environment section's machine and library lines, in order, for
/// report.md and report.html alike. For an external worker the training's own
/// stack comes from its `hello` (Python, torch, CUDA, cuDNN, Lightning,
/// device), never dbh's LibTorch, which it does not run.
std::vector<EnvironmentLine> environment_lines(const RunReport& r);

nlohmann::ordered_json report_json(const RunReport& r);
std::string report_markdown(const RunReport& r);

/// The scenario's settings on one line, as report.md, report.html and the
/// run's first line show them: dbh's model and keys, or for an external
/// worker its command and the keys dbh passes it.
std::string settings_text(const scenario::Scenario& s);
/// JUnit XML for a list of runs: `failure` for unmet expectations, `error`
/// for crashes, timeouts and kills, `skipped` for runs not run here. Under GitLab CI (`ci.gitlab_ci`) each
/// testcase's system-out also carries `[[ATTACHMENT|…]]` lines for its
/// report.md and plots (gitlab_attachments).
/// The class's resolutions, each tried one followed by its verdict (Note
/// [Resolutions that are tried]); Markdown emphasis when `markdown`.
std::vector<std::string> resolutions_with_checks(const std::vector<std::string>& resolutions,
                                                 const std::vector<RunReport::ResolutionCheck>& checks, bool markdown);

/// `resolutions_tried` in report.json and diagnosis.json.
nlohmann::ordered_json resolution_checks_json(const std::vector<RunReport::ResolutionCheck>& checks);

std::string junit_xml(const std::vector<RunReport>& runs, const std::string& suite_name,
                      const CiEnvironment& ci = {});

/// A PNG line plot of one or more series (loss parts, memory) per step,
/// written atomically. Throws ReportError when it cannot be written.
void write_plot_png(const std::string& path, const std::string& title,
                    const std::vector<std::string>& names,
                    const std::vector<std::vector<double>>& series, const std::string& y_label);

}  // namespace dbh::harness::report
