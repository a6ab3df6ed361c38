#pragma once
// What evaluation produces (infer.h computes it): plain values, free of
// LibTorch, so that reports and pages are written from them in torch-free
// code.

#include <cstdint>
#include <string>
#include <vector>

#include "model/eval/icdar_eval.h"
#include "model/eval/postprocess.h"
#include "model/label/polygon.h"

namespace dbh::model {

/// Geometry of one test-time resize. The image is scaled by one factor
/// (aspect ratio kept exactly) and padded bottom/right up to multiples of
/// 32, as the training letterbox pads; x_input = x_original · scale.
///
/// Note [Test-time resize]: [DB] stretches the long side up to the next
/// multiple of 32 instead of padding it (spec §6.3), distorting the aspect
/// ratio by up to 31 px. Padding keeps one scale for both axes, matches what
/// the model saw in training, and lets images of one input size share a
/// batch; detections map back by dividing by `scale` (spec §7.5).
struct TestResize {
  int64_t width = 0;           ///< Original image width (px).
  int64_t height = 0;          ///< Original image height (px).
  int64_t resized_width = 0;   ///< Content width after the resize.
  int64_t resized_height = 0;  ///< Content height after the resize.
  int64_t input_width = 0;     ///< Network input width, a multiple of 32.
  int64_t input_height = 0;    ///< Network input height, a multiple of 32.
  double scale = 1.0;
};

/// What the ICDAR 2015 protocol made of one polygon.
enum class MatchStatus {
  kMatched,    ///< Part of a one-to-one match.
  kUnmatched,  ///< Care and unmatched: a miss (GT) or a false positive.
  kDontCare,   ///< "###" GT, or a detection mostly inside one.
  kInvalid,    ///< Fails is_valid_polygon; skipped by the protocol.
};

/// "matched", "unmatched", "dont_care", "invalid".
std::string to_string(MatchStatus status);

/// match_image with the fate of every polygon. `counts` equals what
/// match_image returns for the same arguments.
struct ImageMatch {
  EvalCounts counts;
  std::vector<MatchStatus> gt_status;   ///< One per ground truth.
  std::vector<int64_t> gt_match;        ///< Matched detection index, or −1.
  std::vector<MatchStatus> det_status;  ///< One per detection.
  std::vector<int64_t> det_match;       ///< Matched ground truth index, or −1.
};

/// Statistics of a probability map over the resized content (padding
/// excluded): they tell "no text found" from "no box passed the thresholds".
struct ProbabilityStats {
  double mean = 0;
  double max = 0;
  /// Fraction of pixels above PostprocessOptions::binarize_thresh.
  double text_fraction = 0;
};

/// Everything evaluation produced for one image.
struct ImageEvaluation {
  std::string file;  ///< As in the annotations (relative to images/).
  TestResize resize;
  ProbabilityStats probability;
  std::vector<Polygon> gt;
  std::vector<bool> gt_ignore;
  std::vector<Detection> detections;
  ImageMatch match;
  EvalResult metrics;  ///< image_metrics(match.counts).
};

/// Where the time went, in seconds, summed over the images.
struct EvaluationTiming {
  double preprocess_s = 0;   ///< Decode, resize, normalise.
  double inference_s = 0;    ///< Forward passes, transfers included.
  double postprocess_s = 0;  ///< detections_from_probability.
  double matching_s = 0;     ///< match_image_detailed.
  int64_t batches = 0;
};

/// The result of evaluating a model on a dataset.
struct DatasetEvaluation {
  std::vector<ImageEvaluation> images;  ///< In dataset order.
  EvalResult overall;                   ///< summarize() over every image.
  EvaluationTiming timing;
};

/// What load_model_state found in a file.
struct ModelStateReport {
  /// "checkpoint" (Trainer::save_checkpoint: the model under "model") or
  /// "weights" (DbNet::save_weights: flat dotted names).
  std::string format;
  /// Trainer step stored in a checkpoint; −1 for weights files.
  int64_t step = -1;
  int64_t loaded = 0;  ///< Parameters and buffers copied into the model.
  /// Model parameters and buffers the file does not hold: left as they were.
  std::vector<std::string> missing;
  /// Entries present with another shape, "name: model [..], file [..]":
  /// left as they were.
  std::vector<std::string> mismatched;
  /// File entries that name nothing in the model.
  std::vector<std::string> unexpected;
  /// Those of `unexpected` under one of the model's own modules (encoder.,
  /// decoder., head.): tensors of a deeper or wider model of the same family,
  /// e.g. encoder.layer1.2.conv1.weight of a ResNet-34 read into a ResNet-18.
  std::vector<std::string> unexpected_model;

  /// Every model parameter and buffer was loaded.
  bool complete() const { return missing.empty() && mismatched.empty(); }
  /// The file holds exactly this model: every tensor loaded and none left
  /// over. A file with more of the model (another depth) is not this model,
  /// even when every tensor of this one happens to be in it.
  bool exact() const { return complete() && unexpected_model.empty(); }
  /// Whether the file may initialise training. Something must load, and no
  /// entry may name a model tensor with another shape: that is a file of
  /// another encoder depth or width, and the few tensors that happen to fit
  /// would train a mostly random network under the file's name. A file that
  /// holds part of the model (a pretrained encoder, another decoder) fits;
  /// the caller says what keeps its initial values (summary()).
  bool fits_as_initial_weights() const { return loaded > 0 && mismatched.empty() && unexpected_model.empty(); }
  /// "164 tensors loaded; missing: a, b, c, … (12 in all); another shape: …".
  std::string summary() const;
};

}  // namespace dbh::model
