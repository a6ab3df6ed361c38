#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/scenario/scenario.h"
#include "harness/supervisor/outcome.h"

namespace dbh::harness::supervisor {

// Note [One judge]: a scenario's `expect` keys are judged here and nowhere
// else. Each key is one row of expect_keys() (its name, whether a bisection
// probe judges it, and the test that names a mismatch); `dbh run`, the suite
// and the probes of bisect, diagnose and qualify all call judge(). A new
// expect key is a member of Expectation (scenario.h), its reading
// (scenario/decode.cc) and writing (scenario/scenario.cc), and a row here.

/// What a run's expectation came to. A run this machine could not run (a
/// device it lacks) is not judged: neither met nor refuted.
enum class ExpectVerdict { kMet, kNotMet, kNotJudged };
std::string to_string(ExpectVerdict v);

/// What a run showed, as the judge reads it: values only, no process.
struct Evidence {
  scenario::Outcome outcome = scenario::Outcome::kUnresolved;
  /// The failure's class, step and module ("" and nullopt when it passed).
  std::string failure_class;
  std::optional<int64_t> failure_step;
  std::string failure_module;
  /// Why the run was skipped (outcome skipped): the device it lacks.
  std::string skip_reason;
  /// The last validation during training, if any ran.
  std::optional<EvalRecord> last_eval;
  /// How far the loss fell, as a fraction (Note [Loss drop]); nullopt with too
  /// few steps to tell.
  std::optional<double> loss_drop;
  /// nullopt when the worker reported no memory figure that was a count
  /// (Note [An unknown is no zero]).
  std::optional<int64_t> peak_memory_bytes;
  /// Fresh processes compared: whether they agreed; nullopt when none were.
  std::optional<bool> identical;
  /// Whether the failure depends on the data (its controls); nullopt when
  /// undecided.
  std::optional<bool> data_dependent;
  /// The signal that stopped the run before it finished ("SIGINT"); "" when
  /// it finished.
  std::string interrupted_by;
};

/// The evidence of one trial: its outcome, failure, validations, loss and
/// peak memory (no determinism or data dependence: those compare trials).
Evidence evidence_of(const TrialAnalysis& a);

/// Note [Loss drop]: the relative fall of the mean loss from the first fifth
/// of the steps to the last fifth (at least one step each); nullopt with
/// fewer than two steps or a first mean that is not positive.
std::optional<double> loss_drop_of(const TrialAnalysis& a);

/// The keys a judgement covers: every key, or only the metric keys a
/// bisection probe judges (min_hmean, loss_drop, max_peak_memory).
enum class ExpectScope { kAll, kMetrics };

/// One expect key: its name under `expect`, whether it is a metric (judged by
/// probes too), and its test: the mismatch line ("step: expected 2, got 1"),
/// or nullopt when met or when the scenario does not set the key.
struct ExpectKey {
  const char* name;
  bool metric;
  std::optional<std::string> (*mismatch)(const scenario::Expectation& e, const Evidence& ev);
};
/// Every expect key, in the order of their mismatch lines.
const std::vector<ExpectKey>& expect_keys();

struct Judgement {
  ExpectVerdict verdict = ExpectVerdict::kMet;
  /// One line per mismatch; for a run not judged, or one interrupted, the
  /// single reason.
  std::vector<std::string> why;
  bool met() const { return verdict == ExpectVerdict::kMet; }
};

/// Judges `ev` against `e`. A skipped run (unless skipped was expected) is
/// not judged; an interrupted run is not met, whatever it showed.
Judgement judge(const scenario::Expectation& e, const Evidence& ev, ExpectScope scope = ExpectScope::kAll);

/// What a run's controls say about its failure (the `controls` of a scenario: the same
/// training with a few keys changed, e.g. on synthetic data).
struct ControlsAnswer {
  /// Whether the failure depends on the data: true when every control passed
  /// and one changed the data (data.source or data.path); false when one
  /// failed too, or when they passed by changing other keys; nullopt when
  /// the run passed (nothing to explain).
  std::optional<bool> data_dependent;
  /// The sentence the reports give for data_dependent ("" when none).
  std::string reason;
  /// The line added to the failure's evidence ("" when none).
  std::string evidence;
};

/// The controls' answer for a run whose main outcome is `main`: `controls`
/// holds each control's outcome and `control_overrides` its overrides
/// ("data.source=synthetic_boxes"); `data` names the scenario's data ("real
/// /data/icdar"), as the reason says it.
ControlsAnswer controls_answer(scenario::Outcome main, const std::vector<scenario::Outcome>& controls,
                               const std::vector<std::vector<std::string>>& control_overrides,
                               const std::string& data);

}  // namespace dbh::harness::supervisor
