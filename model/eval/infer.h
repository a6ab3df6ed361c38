#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <opencv2/core/mat.hpp>
#include <torch/torch.h>

#include "model/choices.h"
#include "model/data/annotation.h"
#include "model/data/dataset.h"
#include "model/dbnet.h"
#include "model/eval/icdar_eval.h"
#include "model/eval/postprocess.h"

namespace dbh::model {

/// Settings of test-time inference and evaluation.
struct InferenceOptions {
  /// Length (px) the side chosen by `side` is resized to; a positive
  /// multiple of 32.
  TORCH_ARG(int64_t, size) = 736;
  TORCH_ARG(ResizeSide, side) = ResizeSide::kShort;
  /// Images per forward pass. Only images whose network inputs have the same
  /// size share a batch, so results never depend on the batch composition.
  TORCH_ARG(int64_t, batch_size) = 1;
  /// "cpu", "cuda" or "cuda:N".
  TORCH_ARG(std::string, device) = "cpu";
  /// Feed the input channels-last (NHWC), as the trainer does.
  TORCH_ARG(bool, channels_last) = true;
  TORCH_ARG(PostprocessOptions, postprocess) = {};
  /// ICDAR 2015 IoU constraint (strictly greater matches).
  TORCH_ARG(double, iou_thresh) = 0.5;
  /// Apply EXIF orientation when decoding (off, as in training).
  TORCH_ARG(bool, apply_exif) = false;
};

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

/// The resize of a width × height image: scale = size / short side (kShort)
/// or size / long side (kLong); content sides round(side · scale), at least
/// 1; input sides the content sides rounded up to multiples of 32, so the
/// chosen side is exactly `size`. Throws c10::Error for non-positive sizes or
/// a `size` that is not a multiple of 32.
TestResize test_time_resize(int64_t width, int64_t height, int64_t size,
                            ResizeSide side);

/// The network input for a decoded BGR 8-bit image (CV_8UC3 or CV_8UC1):
/// resized as `resize` says (INTER_AREA when shrinking, INTER_LINEAR
/// otherwise, as the training letterbox), padded with black bottom/right,
/// converted to RGB and normalised exactly as Dataset::get does ([0, 1]
/// pixels, ImageNet kMean / kStd). Returns [3, input_height, input_width]
/// float32. Throws c10::Error when the image size differs from
/// resize.width × resize.height or the type is not 8-bit.
torch::Tensor preprocess_image(const cv::Mat& bgr8, const TestResize& resize);

/// The probability map P of `images`: `model` in evaluation mode (BatchNorm
/// uses its running statistics, so every image's map is independent of the
/// others in the batch) under torch::InferenceMode, on `device`. The model's
/// training/evaluation mode is restored afterwards; its parameters must
/// already be on `device`.
/// images: [N, 3, H, W] float32, H and W multiples of 32 → [N, 1, H, W]
/// float32 in [0, 1], on the CPU.
torch::Tensor predict_probability(DbNet& model, const torch::Tensor& images,
                                  const torch::Device& device = torch::kCPU,
                                  bool channels_last = true);

/// Detections of one image from its probability map at network input
/// resolution: the map is cropped to the resized content (no detection can
/// come from the padding) and passed to boxes_from_prob_map, which maps the
/// boxes back to original coordinates by dividing by resize.scale.
/// prob: [H, W] or [1, H, W] float32 on the CPU with H = resize.input_height
/// and W = resize.input_width.
std::vector<Detection> detections_from_probability(
    const torch::Tensor& prob, const TestResize& resize,
    const PostprocessOptions& options = {});

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

/// ICDAR 2015 matching for one image (spec §8.1), exactly as match_image
/// decides it (validity, don't-care and IoU come from the same functions),
/// recording which polygons matched which. Throws std::invalid_argument when
/// gt_ignore.size() != gt.size().
ImageMatch match_image_detailed(const std::vector<Polygon>& gt,
                                const std::vector<bool>& gt_ignore,
                                const std::vector<Polygon>& det,
                                double iou_thresh = 0.5);

/// Per-image P/R/H with the official script's per-sample convention: without
/// care ground truth, recall is 1 and precision is 1 when there is no care
/// detection either (0 otherwise); with ground truth and no detection,
/// precision is 0. So an image with nothing to find and nothing found scores
/// H = 1. Dataset-level numbers come from summarize().
EvalResult image_metrics(const EvalCounts& counts);

/// Statistics of a probability map over the resized content (padding
/// excluded): they tell "no text found" from "no box passed the thresholds".
struct ProbabilityStats {
  double mean = 0;
  double max = 0;
  /// Fraction of pixels above PostprocessOptions::binarize_thresh.
  double text_fraction = 0;
};

/// The statistics of `prob` ([H, W] or [1, H, W] float32 on the CPU, at
/// network input resolution) over the content region of `resize`.
ProbabilityStats probability_stats(const torch::Tensor& prob, const TestResize& resize,
                                   double binarize_thresh);

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

/// Called after each image is evaluated, in processing order: the image,
/// how many are done, how many in all.
using EvaluationProgress =
    std::function<void(const ImageEvaluation&, int64_t, int64_t)>;

/// Evaluates `model` on `images` (annotations as scan_dataset returns them;
/// image files under `root`/images): test-time resize, batched inference
/// (images grouped by input size, in batches of at most batch_size),
/// post-processing, ICDAR 2015 matching with "###"/ignored words as
/// don't-care, and summarize(). The model must already be on the device of
/// `options`. Throws DataError naming the file when an image cannot be
/// decoded, and c10::Error for invalid options.
DatasetEvaluation evaluate(DbNet& model, const std::string& root,
                           const std::vector<ImageAnnotation>& images,
                           const InferenceOptions& options = {},
                           const EvaluationProgress& progress = nullptr);

/// Indices of the (at most) `k` worst images of `result`: lowest H-mean
/// first, then most errors (unmatched care ground truth plus unmatched care
/// detections), then dataset order.
std::vector<size_t> worst_images(const DatasetEvaluation& result, size_t k);

/// The evaluator self-check: scores every image's ground truth polygons
/// (ignored ones included) as its own detections and returns the
/// dataset-level H-mean. A sound evaluator gives exactly 1.0 on any dataset
/// whose care words are valid, pairwise distinct polygons and lie outside
/// don't-care words; anything less means matching, validity or don't-care
/// handling is broken. 0 when there is no valid care word at all.
double evaluator_self_check(const std::vector<ImageAnnotation>& images);
double evaluator_self_check(const Dataset& dataset);

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

/// Copies every parameter and buffer of `model` that `path` holds under the
/// same name and shape, from a dbh checkpoint or a weights file, and reports
/// what could not be loaded (unlike DbNet::load_weights, which skips it
/// silently). Tensors are read onto the CPU and copied into the model's
/// tensors in place (device and memory format kept). Throws c10::Error when
/// the file is not a LibTorch archive.
ModelStateReport load_model_state(DbNet& model, const std::string& path);

}  // namespace dbh::model
