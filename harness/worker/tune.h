#pragma once

#include <string>

namespace dbh::harness::worker {

/// Entry point of the hidden `dbh __tune` subcommand (Note [Measured choices]
/// in supervisor/tuning.h): times training steps of the scenario's model at
/// its input size, batch and precision, on synthetic images, for each
/// candidate layout and intra-op thread count its `auto` settings leave open,
/// and writes one `tuning` event (then `done`) to `events_fd`. Candidates are
/// interleaved, each warmed up once; a `heartbeat` follows every timed step.
/// When `budget_seconds` is positive and the first warm-up step shows that
/// warming up and timing every candidate once would take longer, it stops
/// there and says so (`over_budget_step_seconds`; Note [A measurement's
/// budget] in supervisor/tuning.h).
/// Returns 0 after `done`; 1 when nothing could be measured (the event says
/// why).
int tune_main(const std::string& scenario_json, int events_fd, double budget_seconds);

}  // namespace dbh::harness::worker
