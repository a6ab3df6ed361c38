#pragma once
// What `dbh run` and `dbh suite` share (cli/ only): running one scenario into
// its folder and the line that sums it up.

#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "harness/cli/run_command.h"
#include "harness/report/report.h"

namespace dbh::harness::cli {

/// How much a run prints: -q, -v, a terminal or not, --json, progress lines.
struct Printer {
  bool quiet, verbose, tty, json;
  bool progress = true;  // step progress lines (--no-progress turns them off)
  void line(const std::string& s) const;
};

/// An error message as one line: a path or value in it may hold a line
/// break, and a CI log reads a line that starts with "::" as a workflow
/// command.
std::string message(const std::exception& e);

/// The command line's overrides, with the --device and --seed shortcuts.
/// Throws ScenarioError when a shortcut and an override of its key are both
/// given.
std::vector<std::string> run_overrides(const RunOptions& o);

/// Runs the scenario at `path` (its main trials, controls and resolutions)
/// and writes its reports into `out`. Throws ScenarioError.
run::RunReport run_scenario(const std::string& path, const RunOptions& o, const std::filesystem::path& out,
                       const Printer& p);

/// The run's verdict on stdout (unless --json): PASS/FAIL/SKIP, the outcome,
/// why, the report and the repro command.
void print_summary(const run::RunReport& r, const Printer& p);

}  // namespace dbh::harness::cli
