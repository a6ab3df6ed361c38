#pragma once
// Note [The trial sequence]: a run is its main trial (or repeat.processes of
// them: "main", or "process 1" … "process N"), then one trial per control of
// the scenario ("control 1" …: the scenario with the control's keys
// changed), then, when asked and the main trial failed, the resolutions the
// knowledge base lists for the failure's class, each a trial with its
// overrides ("resolution 2" …). After a stop request (SIGINT, SIGTERM) no
// further trial starts; the main trial always exists. The trials are then
// decided (Note [The run's verdicts], run_verdict.h) and the command that
// reproduces the run is composed. Printing is the observer's; the
// environment, the input manifest and the files are the caller's.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "harness/proto/events.h"
#include "harness/run/run_report.h"
#include "harness/scenario/scenario.h"

namespace dbh::harness::run {

/// How a run's trials are carried out, with what the run part needs from
/// the parts above it.
struct TrialSettings {
  /// worker::input_checks(): the input checks only the worker can make,
  /// for the controls' and resolutions' scenarios.
  scenario::InputChecks input_checks;
  bool verify_resolutions = false;      // try the failure's resolutions as trials
  bool withhold_fault_records = false;  // attribution test hook (`--withhold-fault-records`)
  /// Why a finished trial says nothing about the training (its texts: the
  /// stderr tail, the failure's messages), or "" (probe::disk_full_evidence).
  /// A trial the disk could not hold is never an outcome: run_trials throws
  /// ReportError naming its folder.
  std::function<std::string(const std::vector<std::string>& texts)> infrastructure_failure;
};

/// Follows the trials as they run: the command line's progress lines.
class TrialObserver {
 public:
  virtual ~TrialObserver() = default;
  /// A trial of `s` named `label` starts.
  virtual void trial_started(const std::string& label, const scenario::Scenario& s) {}
  /// An event of the running trial, as the supervisor read and checked it.
  virtual void trial_event(const proto::Event& e) {}
  /// The trial ended (before its infrastructure check).
  virtual void trial_finished(const TrialRecord& t) {}
};

/// Runs the trials of `s` (loaded from `path` with `overrides`) into
/// folders under `out_dir` (main/ or process-K/, control-K/, resolution-K/)
/// and returns the run decided, with its repro command; `env`,
/// `inputs_manifest` and `seconds` are left to the caller. Throws
/// ScenarioError for a control or resolution that does not load, and
/// ReportError for a trial the disk could not hold.
RunReport run_trials(scenario::Scenario s, const std::string& path, const std::vector<std::string>& overrides,
                     const std::string& out_dir, const TrialSettings& settings, TrialObserver& observer);

}  // namespace dbh::harness::run
