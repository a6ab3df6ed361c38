#pragma once

#include <opencv2/core/mat.hpp>
#include <vector>

#include "model/label/polygon.h"

namespace dbh::model {

/// Post-processing parameters ([DB] `SegDetectorRepresenter` quad mode with
/// the values of every [DB] config, spec §7.2).
struct PostprocessOptions {
  /// Pixels with probability strictly above this form the text bitmap. Must
  /// be finite.
  double binarize_thresh = 0.3;
  /// Boxes whose mean probability is below this are dropped. Must be finite.
  double box_thresh = 0.7;
  /// r' in the unclip distance D' = A·r'/L. Must be finite and ≥ 0.
  double unclip_ratio = 1.5;
  /// Only the first max_candidates contours are considered. Must be ≥ 0.
  int max_candidates = 1000;
  /// Boxes whose short side (px, network resolution) is below this before
  /// unclipping, or below min_size + 2 after it, are dropped. Must be finite.
  double min_size = 3;
};

/// One detected text box.
struct Detection {
  /// Four corners in ORIGINAL image coordinates, clockwise in image
  /// coordinates (y down) starting top-left: [tl, tr, br, bl].
  Polygon polygon;
  /// Mean probability inside the box before unclipping, in [0, 1] for a
  /// probability map in [0, 1]; never NaN.
  double score = 0;
};

/// [DB] `boxes_from_bitmap` (spec §7.2, quad mode). `prob` is the CV_32FC1
/// probability map at network input resolution (H×W). The network input was
/// the original image resized by `scale` (x_in = x_orig·scale) and padded
/// bottom/right, so detections are mapped back by dividing by `scale` (not by
/// the padded map size, spec §7.5) and clamped to [0, orig_width] ×
/// [0, orig_height].
///
/// Per contour of (prob > binarize_thresh) (RETR_LIST, CHAIN_APPROX_SIMPLE),
/// for the first max_candidates contours: minAreaRect → box; short side <
/// min_size → drop; score = mean of prob over the filled box inside its
/// bounding-box crop ([DB] "fast" score, vertices truncated to int as
/// astype(int32)); score < box_thresh or not a number → drop; unclip the box
/// by D' = area·unclip_ratio/perimeter with offset_polygon (round joins);
/// minAreaRect of all resulting vertices; short side < min_size + 2 → drop.
/// Unlike [DB], mapped coordinates are not rounded to whole pixels.
///
/// Returns no detections for an empty map; never NaN, including for
/// non-finite probabilities. Throws std::invalid_argument for a non-empty map
/// that is not CV_32FC1, a scale that is not finite and positive, negative
/// original sizes, or options outside their documented ranges.
std::vector<Detection> boxes_from_prob_map(
    const cv::Mat& prob, double scale, int orig_width, int orig_height,
    const PostprocessOptions& options = {});

}  // namespace dbh::model
