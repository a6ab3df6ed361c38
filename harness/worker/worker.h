#pragma once

#include <string>

namespace dbh::harness {

/// Entry point of the hidden `dbh __worker` subcommand: runs one trial of the
/// resolved scenario in `scenario_json`, writing events to `events_fd` and
/// files (checkpoints, corrupted dataset copies) under `run_dir`. Returns the
/// process exit code: 0 after `done`, 1 after an error or divergence was
/// reported. Crashes and hangs are the supervisor's to observe.
int worker_main(const std::string& scenario_json, const std::string& run_dir, int events_fd,
                int64_t trial_index);

}  // namespace dbh::harness
