#pragma once
// Note [Silent-failure monitors] (monitors.h): the judgement of one step's
// silent-failure readings, free of LibTorch. Monitors reads the reductions
// off the device in one transfer, unpacks them into SilentReadings and asks
// SilentJudge; the judge says what failed, with its evidence, and Monitors
// emits it as the primary `health` event and stops the run.

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dbh::harness::monitors {

/// Thresholds of the silent-failure monitors (scenario `monitors:` keys).
struct SilentOptions {
  bool input = true;              // input black or saturated
  bool labels = true;             // labels without text, or off the words
  bool predictions = true;        // predictions collapsed
  int64_t collapse_after = 10;    // warm-up steps before predictions are judged
  int64_t collapse_steps = 5;     // consecutive collapsed steps that fail the run
  double collapse_margin = 0.02;  // all probabilities below it, or all above 1 − it
};

/// One step's silent-failure readings, over every micro-batch of the step.
struct SilentReadings {
  struct Image {
    double mean = 0, min = INFINITY, max = -INFINITY;  // de-normalised to 0–255
  };
  std::vector<Image> images;  // per sample; empty when the input is not read
  // Per sample: positive kernel pixels of gt_shrink inside gt_shrink_mask,
  // in all, and inside the annotated word boxes; empty when labels are not read.
  std::vector<double> inside, positives, in_boxes;
  bool has_probabilities = false;  // the probability map was read
  double prob_min = INFINITY, prob_max = -INFINITY, prob_mean = 0;
  std::vector<int64_t> words;    // legible words per sample (Batch::words); −1 when unknown
  std::vector<std::string> ids;  // per sample

  /// The batch's kernel pixels inside the training mask.
  double text_pixels() const;
};

/// What a silent check found: the primary `health` event's check, kind,
/// site, message, evidence and details.
struct SilentFinding {
  std::string check;  // "input_denormalised", "labels_degenerate", "predictions_collapsed"
  std::string kind;   // "input", "label", "prediction"
  std::string site;   // "image", "gt_shrink", "probability"
  std::string message;
  std::vector<std::string> evidence;
  nlohmann::json detail;
};

/// Judges each step's readings in execution order (input, labels,
/// predictions), counting collapsed steps across the steps of a run.
class SilentJudge {
 public:
  explicit SilentJudge(SilentOptions options = {}) : options_(options) {}

  /// Every in-process run is judged on its own.
  void new_run() {
    collapsed_run_ = 0;
    collapsed_since_ = -1;
  }
  /// The first finding of step `step`, or none; stats() then holds what was read.
  std::optional<SilentFinding> judge(int64_t step, const SilentReadings& readings);
  /// What the last judged step read (de-normalised input mean/min/max, text
  /// pixels, probability min/max/mean).
  const nlohmann::json& stats() const { return stats_; }
  void clear_stats() { stats_ = nlohmann::json::object(); }

 private:
  std::optional<SilentFinding> judge_input(int64_t step, const SilentReadings& r) const;
  std::optional<SilentFinding> judge_labels(int64_t step, const SilentReadings& r) const;
  std::optional<SilentFinding> judge_predictions(int64_t step, const SilentReadings& r);

  SilentOptions options_;
  int64_t collapsed_run_ = 0;     // consecutive collapsed steps with text
  int64_t collapsed_since_ = -1;  // first step of that run
  nlohmann::json stats_ = nlohmann::json::object();
};

}  // namespace dbh::harness::monitors
