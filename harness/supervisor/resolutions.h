#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/kb/knowledge_base.h"
#include "harness/supervisor/outcome.h"

namespace dbh::harness::supervisor {

// Note [Resolutions that are tried]: the resolutions of a failure's class
// that the knowledge base can express as overrides (its `verify:` entries)
// are run, each as a trial of its own, and marked by how it went. `dbh run
// --verify-resolutions` and `dbh diagnose` both try them through
// try_resolutions(): one loop, one verdict.

/// How trying a resolution went.
enum class ResolutionVerdict {
  kConfirmed,      // the run with its overrides passed
  kRefuted,        // it still failed
  kUnresolved,     // the run could not tell (cut short, or not run here)
  kNotApplicable,  // not tried: it changes nothing, cannot tell here, or does not fit the scenario
};
/// "confirmed", "refuted", "unresolved", "not applicable" (report.json's
/// `resolutions_tried[].verdict`).
std::string to_string(ResolutionVerdict v);
/// The verdict of a trial that ended with `o`.
ResolutionVerdict resolution_verdict(scenario::Outcome o);

/// One resolution, tried or not.
struct ResolutionCheck {
  size_t resolution = 0;               // 0-based, in the class's resolutions
  std::vector<std::string> overrides;  // as applied (templates computed)
  std::string outcome;                 // of its run; "" when not tried
  std::string klass;                   // its failure class, if it failed; the scenario's refusal when it did not fit
  ResolutionVerdict verdict = ResolutionVerdict::kNotApplicable;
  std::string dir;                     // its run's folder, relative to the command's output; "" when none
  std::string why_not;                 // not tried: why it cannot tell here ("" = it changes nothing)
  /// Note [A measured value over a rule of thumb]: what measured the value
  /// it ran with instead of its template's ("the learning-rate search");
  /// "" when every value is the knowledge base's.
  std::string measured_by;
  /// Each override as an external worker's command is given it ("your
  /// `optim.step_size=12.5`"); empty for dbh's own worker.
  std::vector<std::string> as_passed;
};

// Note [A measured value over a rule of thumb]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A resolution's template is a rule of thumb ("a tenth of the learning
// rate"). Where the command has measured the value the rule guesses at
// (diagnose searched the largest learning rate that trains), a check that
// sets that key runs with the measured value: a rate set 10^6 times too high
// is not refuted by its tenth still diverging while the search has found
// the rate that trains. The check says what measured it.

/// Values a command measured, by dbh key ("train.lr" → "12.5"), and what
/// measured them.
struct MeasuredValues {
  std::map<std::string, std::string> values;
  std::string by;  // "the learning-rate search"
};

/// What one resolution's run gave.
struct ResolutionRun {
  scenario::Outcome outcome = scenario::Outcome::kUnresolved;
  std::string klass;  // its failure class ("" when it passed)
  std::string dir;    // its folder, relative to the command's output ("" when none)
};

/// Runs a resolution: `check` (its overrides as applied, for labels), the
/// overrides to add to the scenario's (its own and `controls=[]`: a
/// resolution runs without the scenario's controls), and its index in the
/// class's checks. May throw ScenarioError when the overrides do not fit the
/// scenario (that resolution is then not applicable).
using RunResolution =
    std::function<ResolutionRun(const ResolutionCheck& check, const std::vector<std::string>& with, size_t index)>;

/// Tries every check of `cls` on the scenario whose resolved JSON is
/// `resolved`: a check that changes nothing or cannot tell here is marked
/// not applicable without a run; the others run through `run`, with
/// `measured`'s value for each key it holds (Note [A measured value over a
/// rule of thumb]). Stops before the next run once `stop()` says so (a stop
/// request); what ran is kept.
std::vector<ResolutionCheck> try_resolutions(const kb::FailureClass& cls, const nlohmann::json& resolved,
                                             const RunResolution& run,
                                             const std::function<bool()>& stop = [] { return false; },
                                             const MeasuredValues& measured = {});

/// Fills each check's `as_passed` for the external worker of `s`: every
/// override of a key its command is passed, in the command's own spelling.
void spell_as_passed(std::vector<ResolutionCheck>& checks, const scenario::Scenario& s);

}  // namespace dbh::harness::supervisor
