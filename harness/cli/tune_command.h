#pragma once
// `dbh tune SCENARIO… [key=value …]`: measures the `auto` layout and thread
// choices of scenarios ahead of their runs (Note [Measured choices]), for a
// CI job's set-up or a new machine, so that no later run pays for it.

#include <string>
#include <vector>

#include "harness/scenario/scenario.h"

#include <nlohmann/json.hpp>

namespace dbh::harness::cli {

struct TuneCommandOptions {
  std::vector<std::string> scenarios;  // scenario files
  std::vector<std::string> overrides;  // key=value, for every scenario
  scenario::InputChecks checks;                  // what loading a scenario checks beyond its keys
};

/// What a scenario's measured choices came to.
enum class TuneVerdict {
  kNothingToChoose,  // both settings explicit, an external worker, or not a training
  kCached,           // a trusted measurement was already in the cache
  kMeasured,         // measured now, trusted, and cached
  kUntrusted,        // measured under other processes' load: nothing cached
  kFailed,           // the measurement failed: nothing cached
};
std::string to_string(TuneVerdict v);

/// The verdict of one resolve_measured_choices() record (null: nothing to
/// choose). Pure.
TuneVerdict judge_tuning(const nlohmann::json& record);

/// The exit status for a list of verdicts: 0 when every scenario has a
/// trusted answer (or nothing to choose), 1 when one will run with
/// PyTorch's defaults because its measurement was untrusted or failed.
int tune_exit_code(const std::vector<TuneVerdict>& verdicts);

/// Loads every scenario first (bad input: UsageError, nothing measured),
/// then measures or reads each one's choices and prints a line per scenario.
/// Returns the process exit code.
int run_tune_command(const TuneCommandOptions& options);

}  // namespace dbh::harness::cli
