// What a run's trials mean: the verdicts of `dbh run` (and each scenario of
// a suite) over values, without a process.

#pragma once

#include <cstdint>
#include <vector>

#include "harness/run/run_report.h"

namespace dbh::harness::run {

/// The repeated processes of a run compared bit for bit: every step's total
/// and micro-batch losses and gradient norm, then the final parameter
/// checksums; the first step where they part, and how. `trials` holds at
/// least one process.
DeterminismCheck compare_processes(const std::vector<TrialRecord>& trials);

/// Note [The run's verdicts]: `r.trials` holds the run's `processes`
/// repeated processes first (the main trial is the first), then one trial per
/// control of `r.scenario`. Sets `r.outcome` and `r.failure` from the main
/// trial, then in order:
/// - determinism: with more than one process, a passing run whose processes
///   differ is `nondeterministic` (class "nondeterminism", at the first
///   divergent step);
/// - data dependence: the controls' answer (`controls_answer`);
/// - the expectation, judged on that evidence (Note [One judge]);
/// - an interruption: `stopped` (the signal that stopped the run, else 0)
///   makes the run `unresolved`, never a result, and skips the comparisons
///   of trials that may be missing.
void decide_run(RunReport& r, int64_t processes, int stopped);

}  // namespace dbh::harness::run
