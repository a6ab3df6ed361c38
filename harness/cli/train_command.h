#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dbh::harness::cli {

/// A flag of `dbh train` and the scenario key it sets (Note [One training
/// builder]): the schema checks its value, with the scenario's bounds and
/// defaults, and an error names the flag.
struct TrainFlag {
  std::string flag;  // "--steps"
  std::string key;   // "train.max_steps"
  std::string help;
};

/// Every value flag of `dbh train`, in `--help` order.
const std::vector<TrainFlag>& train_flags();

/// Settings of `dbh train`, a plain training run without a scenario file.
struct TrainCommandOptions {
  /// The value flags given, (flag, text) in train_flags() order.
  std::vector<std::pair<std::string, std::string>> given;
  bool augment = true;           // DB training augmentation on real data (as the reference trains)
  bool validate_batches = false;  // per-batch validation hook
  bool allow_partial = false;    // --weights may leave tensors at their initial values (as eval's)
  std::string out;               // output folder; default reports/runs/train-<time>
  bool quiet = false;
};

/// The scenario overrides `options` stands for: dbh train's own defaults
/// (augmentation on, per-batch validation off), then the flags given.
/// Throws UsageError for a flag combination no key expresses.
std::vector<std::string> train_overrides(const TrainCommandOptions& options);

/// Runs the training and writes metrics.csv, summary.json and the final
/// checkpoint into the output folder. Returns the process exit code.
int run_train_command(const TrainCommandOptions& options);

}  // namespace dbh::harness::cli
