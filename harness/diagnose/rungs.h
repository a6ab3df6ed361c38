#pragma once
// The rungs `dbh diagnose` runs (Note [The diagnosis ladder]): each a variant
// of the diagnosed scenario, probed, with the row the pages show.

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "harness/diagnose/hypotheses.h"
#include "harness/probe/probe.h"
#include "harness/scenario/scenario.h"

namespace dbh::harness::diagnose {

struct Rung {
  RungId id;
  std::string name;       // what the row says
  std::string group;      // ladder | variant | learning rate | learning
  std::vector<std::string> overrides;
  std::string applies;    // "" when it applies, else why not
  probe::ProbeResult probe;
  bool ran = false;
  double rate = 0;        // a learning rate the search tried
  bool blocked = false;   // n/a because this worker cannot serve it (another could)
};

/// The row's result: "works", "FAILS: diverged `nonfinite_loss` at step 3",
/// "n/a (…)", "could not tell (…)".
std::string row_result(const Rung& r);

/// The rungs' evidence for conclude_ladder: every rung of the groups, in
/// order, and what the full scenario's failure (`klass`, "" when it passed)
/// is.
Ladder ladder_of(std::initializer_list<const std::vector<Rung>*> groups, const std::string& klass, bool silent,
                 bool real_data);

std::vector<std::string> concat_overrides(std::vector<std::string> a, const std::vector<std::string>& b);

/// The diagnosis ladder for `s`, from the device up to the scenario as given
/// (the last rung); a rung that cannot tell anything here says why.
std::vector<Rung> ladder_rungs(const scenario::Scenario& s);

/// The variants a failing scenario is tried with: cuDNN settings,
/// precision, batch, memory, blocking launches, and the first batch repeated
/// (Note [The first batch, repeated]).
std::vector<Rung> variant_rungs(const scenario::Scenario& s);

/// Note [The learning rung]: whether the model learns at all, on synthetic
/// boxes and on the real data, for a silent failure.
std::vector<Rung> learning_rungs(const scenario::Scenario& s, bool silent);

// Note [What the command checks is not a cause]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A command's overrides are of two kinds: those that change the training
// (its data, model, optimizer, device, faults, the user's own keys) and
// those that set what is checked and judged (`monitors.*`, `expect`,
// `limits.*`, `repeat.*`: the learning window that notices a clip of 1e-12,
// the second run that shows a leak). Without the second kind the failure is
// not looked for: the run without them "passes", and a config bisection
// would name the check as the cause. So the run without the command's
// overrides drops the first kind only, and the config bisection bisects the
// first kind with the second kind on both sides. The monitors that change
// what a step computes (numerics_jitter, numerics_replay, numerics_variant)
// are changes.

/// The command's overrides by kind, in their order.
struct CommandOverrides {
  std::vector<std::string> checks;   // set what is checked and judged: kept on both sides
  std::vector<std::string> changes;  // change the training: dropped by the run without them, bisected
};
/// Splits `overrides` (Note [What the command checks is not a cause]). Pure.
CommandOverrides split_command_overrides(const std::vector<std::string>& overrides);

/// Note [The run without the command's overrides]: one rung, the scenario
/// without the command's changes (n/a when there are none). It is run by a
/// Prober with the command's checks only.
std::vector<Rung> without_overrides_rungs(const CommandOverrides& overrides);

/// `dbh diagnose --max-probes N`: the most rungs a diagnosis runs beyond its
/// ladder (the variants, the learning-rate search, the run without the
/// command's overrides, the learning rungs), cached answers included; 0: no
/// limit. A rung past it is not run and says so, so an unsure diagnosis
/// names it among those that could decide.
struct ProbeBudget {
  int64_t max = 0;
  int64_t spent = 0;
  bool exhausted() const { return max > 0 && spent >= max; }
  std::string why_not() const;  // "not run: the probe budget (--max-probes N) was spent"
};

/// Runs `r` as a probe when it applies and its worker can serve it (else
/// n/a with the reason), then checks it against what its trial did. With a
/// `budget`, a rung past it is n/a and blocked, and one that runs counts.
void run_rung(probe::Prober& prober, Rung& r, ProbeBudget* budget = nullptr);
/// run_rung on each of `rungs` in order; with jobs to spare, the ones after
/// it that can run start ahead (Note [Probes ahead, in parallel] in
/// probe/probe.h), within the budget: the same rungs, the same results.
void run_rungs(probe::Prober& prober, std::vector<Rung>& rungs, ProbeBudget* budget = nullptr);
/// Each rung of `rungs` that ran and never started what it asks, judged
/// against the scenario's own run (start_departure), made unresolved with why.
void check_against_scenario(std::vector<Rung>& rungs, const supervisor::TrialAnalysis& scenario_run);

// Note [The next probe chosen to decide]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every rung that applies and that the worker can serve runs, unless the
// user sets a budget (`--max-probes N`). Under a budget the order decides
// what is learnt: after the ladder, the run without the command's overrides
// (one probe that, when it trains, hands the difference to the config
// bisection), then the variants one at a time, the next chosen after every
// probe among those that can weigh on the hypotheses the evidence so far
// leaves best (rungs_about), then the rest, the learning-rate search and
// the learning rungs. With `--jobs` above 1 the variants' order is chosen
// once, after the ladder, so that they can run ahead in parallel. A rung
// the budget leaves out is n/a and blocked, so a diagnosis left unsure
// names it, with why, among the rungs that could have decided.

/// Note [The next probe chosen to decide]: `rungs` from `from` on
/// reordered, stably, so that those that can weigh on the hypotheses `now`
/// ranks best (the tied ones, else the first) come first: under a budget,
/// the probes that can separate them run before the rest. Pure.
void order_to_decide(std::vector<Rung>& rungs, const LadderConclusion& now, size_t from = 0);

/// Note [The next probe chosen to decide]: each rung of `rungs` run by
/// `run`, one at a time, the next chosen after every probe: before each,
/// those left are ordered by what `judge` (the evidence so far, `rungs`
/// included) ranks best.
void run_to_decide(std::vector<Rung>& rungs, const std::function<LadderConclusion()>& judge,
                   const std::function<void(Rung&)>& run);

/// A number as an override writes it, in as few digits as tell it: "12.5".
std::string number_text(double x);

/// Note [The learning rate, searched]: the rates a divergence of `s` (its
/// failure `klass`) was tried at, one rung each, in the order run; none when
/// the failure is no divergence. `configured`: the configuration's own rate
/// (the scenario without the command's overrides).
struct RateSearch {
  std::vector<Rung> rungs;
  double floor = 0;
  bool floor_is_configured = false;
  bool reached_floor = false;  // or three decades left the failure unchanged: the search stops there
  std::string not_run;  // why no rate was tried, "" when some were
  /// The largest rate tried that trained: the rung of its run; null when none.
  const Rung* answer() const;
};
/// What the search answered, as a line of the next steps ("" when it did
/// not run): the largest rate that trains in dbh's key and, for an external
/// worker, as its command is given it.
std::string rate_search_summary(const RateSearch& r, const scenario::Scenario& s);

RateSearch search_learning_rate(probe::Prober& prober, const scenario::Scenario& s,
                                const supervisor::TrialAnalysis& failure, double configured,
                                ProbeBudget* budget = nullptr);

}  // namespace dbh::harness::diagnose
