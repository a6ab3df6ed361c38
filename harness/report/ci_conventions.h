#pragma once

// What a CI service expects from a test tool besides its exit code: GitHub
// Actions' job summary and workflow-command annotations, GitLab's JUnit
// attachments. Torch-free; `dbh run` and `dbh suite` publish through it.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "harness/run/run_report.h"

namespace dbh::harness::report {

/// GitHub's limit on a step's job summary file ($GITHUB_STEP_SUMMARY).
inline constexpr size_t kGithubSummaryLimit = 1024 * 1024;
/// GitHub shows at most this many error and this many warning annotations
/// per step; dbh emits no more, the last one counting the rest.
inline constexpr size_t kGithubAnnotationLimit = 10;

/// The CI service a command runs under, read from its environment.
struct CiEnvironment {
  bool github_actions = false;      // GITHUB_ACTIONS=true
  std::string github_step_summary;  // GITHUB_STEP_SUMMARY: the job summary file
  std::string github_workspace;     // GITHUB_WORKSPACE: paths are shown relative to it
  bool gitlab_ci = false;           // GITLAB_CI=true
  std::string gitlab_project_dir;   // CI_PROJECT_DIR: attachment paths are relative to it
};

/// Reads the variables above from `env` (names to values).
CiEnvironment ci_environment(const std::map<std::string, std::string>& env);

/// One scenario as a CI service shows it: a summary row, and a failure block
/// and annotation when its expectation was not met.
struct CiResult {
  std::string scenario;
  std::string outcome;  // "passed", "diverged", …; "interrupted" when it never finished
  std::string klass;    // failure class, "" when none
  std::optional<int64_t> step;
  std::string module;
  bool expectation_met = false;
  /// Not run on this machine (a device it lacks): a skip in every output,
  /// never an error (Note [One verdict] in report/report.h).
  bool skipped = false;
  /// Met, but not reliably: a nondeterministic outcome, or repeated
  /// processes that did not all pass (a flaky failure).
  bool unsure = false;
  std::string report;                // path of report.md, "" when none
  std::vector<std::string> why;      // unmet parts of the expectation
  std::string message;               // the failure message (may span lines)
  std::string repro;                 // one-line reproduce command
};

/// The CI view of a finished run.
CiResult ci_result(const run::RunReport& r);

/// `s` escaped as the message of a GitHub workflow command: valid UTF-8, with
/// '%', '\r' and '\n' as %25, %0D and %0A.
std::string github_escape_data(const std::string& s);
/// `s` escaped as a workflow command's property value: as a message, and
/// ':' and ',' as %3A and %2C.
std::string github_escape_property(const std::string& s);
/// One workflow command line: "::LEVEL title=TITLE::MESSAGE\n", escaped.
std::string github_annotation(const std::string& level, const std::string& title, const std::string& message);

/// `::error` annotations for the results whose expectation was not met and
/// `::warning` ones for the unsure, at most kGithubAnnotationLimit of each
/// (the last then says how many more there are).
std::string github_annotations(const std::vector<CiResult>& results);

/// The Markdown job summary of `results` under the heading `title`: one table
/// row per scenario (outcome, class, step, module, expectation, report path
/// relative to `workspace` when under it) and a "Failures" section with the
/// first lines of each failure message and its reproduce command. Every
/// user-provided string is escaped; the text is valid UTF-8 of at most
/// `max_bytes` bytes, cut only between rows and blocks with a note saying
/// what was left out; "" when not even the heading fits.
std::string github_summary_markdown(const std::string& title, const std::vector<CiResult>& results,
                                    const std::string& workspace, size_t max_bytes = kGithubSummaryLimit);

/// Under GitHub Actions: appends the job summary to $GITHUB_STEP_SUMMARY
/// (within what its 1 MiB limit leaves) and writes the annotations to
/// `annotations`. When the summary file is unset or cannot be written it
/// warns on `err` once per process and goes on. Never throws; does nothing
/// outside GitHub Actions. The summary is never appended to one of `keep`
/// (the scenarios run, the command's output folder) or a file inside it.
void publish_to_github(const CiEnvironment& ci, const std::string& title, const std::vector<CiResult>& results,
                       std::ostream& annotations, std::ostream& err, const std::vector<std::string>& keep = {});

/// The JUnit system-out lines that make GitLab's test page open a run's files:
/// "[[ATTACHMENT|PATH]]" for report.md (GitLab links the first) and for each
/// plot (loss.png, hmean.png, memory.png) present in `run_dir`, PATH relative
/// to `project_dir` when the folder lies under it. Paths GitLab's marker cannot
/// carry (with "]]", '|' or a line break) are left out. "" for an empty dir.
std::string gitlab_attachments(const std::string& run_dir, const std::string& project_dir);

}  // namespace dbh::harness::report
