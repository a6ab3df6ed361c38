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
#include "model/eval/evaluation.h"
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

/// The statistics of `prob` ([H, W] or [1, H, W] float32 on the CPU, at
/// network input resolution) over the content region of `resize`.
ProbabilityStats probability_stats(const torch::Tensor& prob, const TestResize& resize,
                                   double binarize_thresh);

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

/// Copies every parameter and buffer of `model` that `path` holds under the
/// same name and shape, from a dbh checkpoint or a weights file, and reports
/// what could not be loaded (unlike DbNet::load_weights, which skips it
/// silently). Tensors are read onto the CPU and copied into the model's
/// tensors in place (device and memory format kept). Throws c10::Error when
/// the file is not a LibTorch archive.
ModelStateReport load_model_state(DbNet& model, const std::string& path);

}  // namespace dbh::model
