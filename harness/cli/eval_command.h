#pragma once

#include <cstdint>
#include <string>

namespace dbh::harness::cli {

/// Settings of `dbh eval`: score a checkpoint on a dataset with the ICDAR
/// 2015 protocol.
struct EvalCommandOptions {
  std::string weights;  // dbh checkpoint or weights file
  std::string data;     // dataset folder (images/ + annotations)
  std::string out;      // output folder; default reports/runs/eval-<time>
  std::string on_invalid = "error";  // error | skip | clip
  std::string encoder = "resnet18";  // resnet18 | resnet34 | resnet50 (or 18, 34, 50)
  std::string decoder = "fpn";       // fpn | pan
  int64_t size = 736;                // test-time size of `side`, multiple of 32
  std::string side = "short";        // short | long
  int64_t batch_size = 1;
  double binarize_thresh = 0.3;
  double box_thresh = 0.7;
  double unclip_ratio = 1.5;
  int64_t max_candidates = 1000;
  double iou_thresh = 0.5;
  int64_t threads = 0;  // intra-op threads; 0 = all cores
  std::string device = "cpu";
  int64_t overlays = 5;  // overlays of the K images with the lowest H-mean
  bool allow_partial = false;  // evaluate even when some tensors did not load
  std::string save_weights;    // also write the loaded model as a weights file
  bool quiet = false;
};

/// Runs the evaluation and writes eval.json, eval.md and overlays/ into the
/// output folder. Returns 0 when the evaluation ran (whatever the score);
/// throws UsageError for bad input (exit 2).
int run_eval_command(const EvalCommandOptions& options);

}  // namespace dbh::harness::cli
