#pragma once

#include "harness/scenario/scenario.h"
#include "harness/supervisor/outcome.h"

namespace dbh::harness::supervisor {

/// What a trial that ended `done passed` on the schedule asked for is judged
/// for, in this order: growth across its in-process runs (Note [What a run
/// leaves behind]), its validations (Note [A worker's own validation
/// metrics]), updates that change nothing (Note [Updates that change
/// nothing]) and a loss that does not fall (the learning window). The first
/// that fails sets `a`'s outcome and failure; a run none fails stays passed.
void judge_passed_run(const ClassifyOptions& opts, const scenario::Scenario& s, TrialAnalysis& a);

/// Note [A loss that explodes has diverged]: a passed run whose finite loss
/// rose above monitors.loss_explosion_factor times its run's first step's,
/// or a non-finite divergence whose loss did so at an earlier step, fails as
/// `loss_exploded` at that step (the non-finite finding kept as evidence).
void judge_loss_explosion(const scenario::Scenario& s, TrialAnalysis& a);

}  // namespace dbh::harness::supervisor
