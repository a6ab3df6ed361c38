#pragma once

#include <cstdint>
#include <string>

namespace dbh::harness {

/// Settings of `dbh train`, a plain training run without a scenario.
struct TrainCommandOptions {
  std::string data;  // dataset directory; empty = synthetic
  std::string on_invalid = "error";  // error | skip | clip
  bool augment = true;               // DB training augmentation on real data (as the reference trains)
  int64_t num_workers = 0;           // loader threads; 0 = inline
  bool validate_batches = false;     // per-batch validation hook
  std::string source = "synthetic_boxes";  // when data is empty
  int64_t encoder = 18;
  std::string decoder = "fpn";
  int64_t batch_size = 2;
  int64_t size = 128;
  int64_t steps = 5;
  int64_t accumulation = 1;
  std::string optimizer = "sgd";
  double lr = 0.007;
  double grad_clip = 0.0;
  std::string precision = "fp32";
  std::string device = "cpu";
  uint64_t seed = 42;
  int64_t threads = 0;  // 0 = all cores
  std::string out;      // output folder; default reports/runs/train-<time>
  std::string weights;  // optional initial weights
  int64_t checkpoint_every = 0;
  std::string resume;  // checkpoint to resume from
  bool quiet = false;
};

/// Runs the training and writes metrics.csv, summary.json and the final
/// checkpoint into the output folder. Returns the process exit code.
int run_train_command(const TrainCommandOptions& options);

}  // namespace dbh::harness
