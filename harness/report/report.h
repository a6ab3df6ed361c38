#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/env/environment.h"
#include "harness/report/ci_conventions.h"
#include "harness/run/run_report.h"
#include "harness/scenario/scenario.h"
#include "harness/supervisor/outcome.h"
#include "harness/supervisor/resolutions.h"

namespace dbh::harness::report {

/// report.json's memory timeline holds a trial's first and last this many
/// steps (`timeline_omitted` counts the rest; metrics.csv has them all).
inline constexpr size_t kJsonTimelineEnds = 200;



/// The report's title, the same on every page: the failure ("NaN/Inf in
/// activations in decoder.fusion at step 1"), "Scenario X passed", "Scenario
/// X not run on this machine", or, for an unmet expectation without a
/// failure, "Scenario X: expectation not met (training passed)".
std::string report_title(const run::RunReport& r);

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
std::vector<EnvironmentLine> environment_lines(const run::RunReport& r);

nlohmann::ordered_json report_json(const run::RunReport& r);
std::string report_markdown(const run::RunReport& r);

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
                                                 const std::vector<run::RunReport::ResolutionCheck>& checks, bool markdown);

/// `resolutions_tried` in report.json and diagnosis.json.
nlohmann::ordered_json resolution_checks_json(const std::vector<run::RunReport::ResolutionCheck>& checks);

std::string junit_xml(const std::vector<run::RunReport>& runs, const std::string& suite_name,
                      const CiEnvironment& ci = {});

/// A PNG line plot of one or more series (loss parts, memory) per step,
/// written atomically. Throws ReportError when it cannot be written.
void write_plot_png(const std::string& path, const std::string& title,
                    const std::vector<std::string>& names,
                    const std::vector<std::vector<double>>& series, const std::string& y_label);

}  // namespace dbh::harness::report
