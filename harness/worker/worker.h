#pragma once

#include <optional>
#include <string>

#include "harness/scenario/scenario.h"

namespace dbh::harness::worker {

/// Entry point of the hidden `dbh __worker` subcommand: runs one trial of the
/// resolved scenario in `scenario_json`, writing events to `events_fd` and
/// files (checkpoints, corrupted dataset copies) under `run_dir`. Returns the
/// process exit code: 0 after `done`, 1 after an error or divergence was
/// reported. Crashes and hangs are the supervisor's to observe.
int worker_main(const std::string& scenario_json, const std::string& run_dir, int events_fd,
                int64_t trial_index);

/// The scenario's model files read as its worker will read them: a
/// model.weights of another model (ModelStateReport::fits_as_initial_weights)
/// and a train.resume_from that is not a checkpoint of this model before its
/// last step are bad input, refused (exit 2) before anything runs; the worker
/// keeps its own checks for a scenario given to it directly.
std::optional<scenario::InputFileProblem> check_model_files(const scenario::Scenario& s);

/// The checks of a scenario's inputs that need dbh's model
/// (check_model_files), for load_scenario: every command that loads a
/// user's scenario passes them (Note [Decode, then check]).
scenario::InputChecks input_checks();

}  // namespace dbh::harness::worker
