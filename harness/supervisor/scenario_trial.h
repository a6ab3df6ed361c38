#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "harness/proto/events.h"
#include "harness/scenario/scenario.h"
#include "harness/supervisor/outcome.h"
#include "harness/supervisor/trial.h"

namespace dbh::harness::supervisor {

/// What a supervised trial of a scenario returned, and its classification.
struct ScenarioTrial {
  TrialResult result;
  TrialAnalysis analysis;
};

/// Runs one supervised trial of `s` in `dir`: writes the resolved scenario to
/// `<dir>/scenario.resolved.json`, re-executes this binary as its worker
/// (`/proc/self/exe __worker --scenario … --run-dir … --trial <index>`) under
/// the scenario's limits and classifies the result with the shipped
/// knowledge base. Does not judge the infrastructure (a torn journal, a spawn
/// failure): the callers do. `on_event` sees every event as it arrives.
ScenarioTrial run_classified_trial(const scenario::Scenario& s, const std::string& dir, int64_t index,
                                   bool withhold_fault_records, const std::function<void(const proto::Event&)>& on_event);

/// Runs one supervised trial of `s` in `dir` as run_classified_trial does
/// (shared by `dbh run` and the probes of bisect). `stderr_tail` receives the
/// end of the worker's stderr. Throws ReportError when the trial's events
/// could not be written.
TrialAnalysis run_scenario_trial(const scenario::Scenario& s, const std::string& dir, int64_t index,
                                 bool withhold_fault_records, std::string* stderr_tail,
                                 const std::function<void(const proto::Event&)>& on_event);

}  // namespace dbh::harness::supervisor
