#pragma once
// The diagnosis ladder's judgement (Note [The diagnosis ladder]): from what
// each rung showed to hypotheses ranked by evidence and one conclusion. Pure:
// no process, no file; `dbh diagnose` runs the rungs and writes the pages.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/supervisor/outcome.h"

namespace dbh::harness::diagnose {

/// The rungs of the ladder: the seeds' diagnosis steps, each a variant of the
/// scenario run as a probe.
enum class RungId {
  kOps,                // basic tensor ops on the device
  kModelStep,          // forward/backward on synthetic data, one step
  kSynthetic,          // the full trainer on synthetic boxes
  kRealNoWorkers,      // the real data, num_workers=0
  kRealWorkers,        // the real data with loader workers
  kOneRunPerProcess,   // each run in a fresh process (repeat.in_process=1)
  kAsGiven,            // the scenario as given
  kWithoutOverrides,   // the scenario without the command's overrides
  kFixedBatch,         // the first batch, repeated at every step (data.fixed_batch)
  kCudnnDeterministic,
  kCudnnBenchmarkOff,
  kCudnnDisabled,
  kFp32,
  kBf16,
  kSmallerBatch,
  kMoreMemory,
  kBlockingLaunches,
  kLowerLearningRate,  // a divergence: the same run at a lower learning rate (one per rate the search tried)
  kLearnsSynthetic,    // silent failures: does the loss fall on synthetic boxes?
  kLearnsReal,         // … and on the real data?
};

/// What one rung showed.
struct RungEvidence {
  RungId id = RungId::kAsGiven;
  std::string name;    // the row's label
  std::string result;  // the row's result text ("works", "FAILS: …", "n/a (…)")
  bool ran = false;
  scenario::Outcome outcome = scenario::Outcome::kPassed;
  std::string klass;   // its failure class, "" when it passed
  std::optional<int64_t> step;  // the step its failure names
  double rate = 0;     // kLowerLearningRate: the rate it ran at
  bool blocked = false;  // not run because this worker cannot serve it (another could)

  /// A failure the harness could tell (an unresolved rung is evidence of nothing).
  bool failed() const { return ran && supervisor::is_failure(outcome) && outcome != scenario::Outcome::kUnresolved; }
  bool passed() const { return ran && !supervisor::is_failure(outcome); }
  std::string cite() const { return name + ": " + result; }
};

enum class HypothesisId {
  kData,
  kLoader,
  kModel,
  kDevice,
  kCudnn,
  kAmp,
  kMemory,
  kResources,
  kKernel,
  kOptimizer,
  kLabels,
  kOverrides,  // a setting the diagnosed command changes
};
std::string to_string(HypothesisId id);

/// The hypothesis a scenario key is a setting of (train.lr: the optimizer,
/// data.batch_size: memory, train.precision: AMP, …); nullopt for a key no
/// hypothesis is about (the run's length, a key of the user's own).
std::optional<HypothesisId> hypothesis_of_key(const std::string& key);

/// The hypothesis an override `key=value` sets a setting of: its key's, or
/// for a Lightning key passed to the user's training as written, its dbh
/// key's (`trainer.gradient_clip_val=…`: the optimizer).
std::optional<HypothesisId> hypothesis_of_override(const std::string& override_text);

/// Note [Evidence by direction]: what a rung shows weighs by what changed
/// and how. A change that ends the failure shows its hypothesis (for); the
/// same failure, unchanged, under a change large enough to matter shows
/// against it. A failure that moves later under a smaller rate, batch or
/// headroom only suggests (the change addresses it, but not enough), and so
/// does an unchanged failure under a change too small to rule it out. A
/// change that turns the failure into another is weighed for nothing.
enum class Strength { kSuggests = 1, kShows = 2 };
std::string to_string(Strength s);

/// One line of evidence and its weight.
struct EvidenceLine {
  EvidenceLine(std::string t, Strength s = Strength::kShows) : text(std::move(t)), strength(s) {}  // NOLINT: a line shows unless said
  std::string text;
  Strength strength = Strength::kShows;
};

struct Hypothesis {
  HypothesisId id = HypothesisId::kModel;
  std::string title;
  std::vector<EvidenceLine> support;
  std::vector<EvidenceLine> refute;
  /// What a person would do next; `{dbh}` and `{scenario}` stand for the
  /// binary that ran and the diagnosed scenario with its overrides
  /// (next_steps_text fills them in, so each command runs as pasted).
  std::string next;
  int weight_for() const;
  int weight_against() const;
  int score() const { return weight_for() - weight_against(); }
};

/// Note [Evidence by direction]: the rungs whose result can weigh for or
/// against `id` (the weighing's own rows, checked against it by a test).
/// When the best hypotheses tie, these are the rungs that could separate
/// them.
const std::vector<RungId>& rungs_about(HypothesisId id);

/// The kind of failure the scenario's own run shows, from its class in the
/// knowledge base: it decides what a failing rung is evidence of.
enum class FailureKind {
  kNone,       // the scenario passes
  kCrashOrError,
  kKernel,     // a sticky CUDA error
  kSilent,     // finite but learns nothing or its metrics miss
  kResources,  // something grows from one run to the next in one process
};

struct Ladder {
  std::vector<RungEvidence> rungs;  // in any order; each id at most once, kLowerLearningRate once per rate
  FailureKind kind = FailureKind::kNone;
  std::string klass;                // the scenario's failure class
  bool real_data = false;
  bool memory_exhaustion = false;   // klass is memory running out
  bool data_invalid = false;        // klass is a data defect
  std::optional<int64_t> failure_step;  // the step the scenario's own failure names
  /// Note [The learning rate, searched]: where the search stopped looking
  /// (0 when none ran) and whether that is the configuration's own rate.
  double lr_floor = 0;
  bool lr_floor_is_configured = false;
  bool lr_reached_floor = false;  // or three decades down left the failure unchanged
  /// The command's overrides that the config bisection found, confirmed, to
  /// make the scenario fail (`key=value`, dbh's keys); empty when none ran.
  std::vector<std::string> override_cause;
  /// The rung with `id`, or nullptr when the ladder has none.
  const RungEvidence* find(RungId id) const;
};

/// What the ladder concludes: the hypotheses ranked by evidence (for minus
/// against, stable in the declared order), and the conclusion: "passes",
/// "data-dependent", a hypothesis id, or "unsure" when none has more for it
/// than against it or when the best are tied (list order decides nothing).
struct LadderConclusion {
  std::vector<Hypothesis> ranked;
  std::string conclusion;
  std::vector<HypothesisId> tied;  // the best, when more than one shares the top score
  /// When unsure: each rung that speaks to a tied hypothesis (or to any,
  /// when none has evidence) but that this worker could not serve, or that
  /// ran and could not tell, with why ("name: n/a (…)"). A rung that does
  /// not apply here at all (no cuDNN on a CPU) is not one.
  std::vector<std::string> could_decide;
  bool data_dependent = false;
  /// Note [The samples, named]: the failure is in the samples and one can
  /// be found (data-dependent, or the data hypothesis alone on top of a
  /// failure that is neither silent nor growth across runs): `bisect data`
  /// follows, whatever else ran before it.
  bool find_samples = false;
};

/// Whether `c` is growth across the runs of one process (its events include
/// `leaked`): "works on the first run, fails on the second".
bool grows_across_runs(const kb::FailureClass& c);

/// The kind of failure class `klass` is (kNone for "").
FailureKind failure_kind(const std::string& klass, bool silent_class, bool resource_class);

/// Judges the ladder. Pure.
LadderConclusion conclude_ladder(const Ladder& ladder);

/// Note [A rung is checked against what its trial did]: a rung is evidence
/// only of what it asked for. An ops rung whose trial trained steps, a
/// one-step rung that trained more, or a synthetic rung whose trial failed
/// reading a sample ran something else: why, in
/// words, or "" when the trial did what the rung asks. Such a rung is
/// unresolved, evidence of nothing.
std::string rung_departure(RungId id, const supervisor::TrialAnalysis& trial);

/// Note [A rung is checked against what its trial did], against the
/// scenario's own run: a rung that trains, whose trial ended before its first
/// step by a failure that names no step and that the scenario's run did not
/// have, while that run trained steps, never started what it asks (the
/// training could not start that way: a folder it cannot find, a key it
/// refuses). Why, in words, or "" when it started. Unresolved, evidence of
/// nothing: "fails the same way" it does not.
std::string start_departure(RungId id, const supervisor::TrialAnalysis& trial,
                            const supervisor::TrialAnalysis& scenario_run);

}  // namespace dbh::harness::diagnose
