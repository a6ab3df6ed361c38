#pragma once

#include <cstdint>
#include <vector>

#include "model/label/polygon.h"

namespace dbh::model {

/// Polygon geometry for evaluation runs on Clipper integers: coordinates are
/// multiplied by kEvalScale = 2^8 and rounded (1/256 px precision).
inline constexpr double kEvalScale = 256.0;

/// Polygons with a coordinate larger than this (px) in absolute value are
/// invalid for evaluation; it keeps every cross product of scaled
/// coordinates exact in int64.
inline constexpr double kMaxEvalCoordinate = 1048576.0;  // 2^20

/// ICDAR 2015 AREA_PRECISION_CONSTRAINT: a detection is don't-care when more
/// than this fraction of its area lies in one don't-care ground truth.
inline constexpr double kDontCareAreaFraction = 0.5;

/// The Shapely `is_valid` check the [DB] evaluator applies to both sides, on
/// the scaled integer vertices: at least 3 vertices once consecutive repeats
/// are dropped, finite coordinates within kMaxEvalCoordinate, non-zero area,
/// and a simple ring (no two edges meet except adjacent edges at their shared
/// vertex; self-touching counts as invalid, as in Shapely). Either
/// orientation.
bool is_valid_polygon(const Polygon& poly);

/// Area of the intersection of two polygons (Clipper ctIntersection on the
/// scaled integer vertices), in px². 0 if either polygon is invalid.
double polygon_intersection_area(const Polygon& a, const Polygon& b);

/// Intersection over union of two polygons, in [0, 1]; union = A + B − I.
/// 0 if either polygon is invalid (is_valid_polygon) or the union is empty.
double polygon_iou(const Polygon& a, const Polygon& b);

/// Per-image counts of the ICDAR 2015 protocol.
struct EvalCounts {
  int64_t gt = 0;       ///< Valid, care ground truths.
  int64_t det = 0;      ///< Valid detections that are not don't-care.
  int64_t matched = 0;  ///< One-to-one matches.
};

/// Dataset-level metrics.
struct EvalResult {
  double precision = 0;
  double recall = 0;
  double hmean = 0;
  EvalCounts counts;  ///< Sums over the images.
};

/// ICDAR 2015 Task 4.1 matching for one image (spec §8.1, [DB]
/// `concern/icdar2015_eval/detection/iou.py`):
///  1. invalid polygons (is_valid_polygon) are skipped on both sides;
///  2. gt[i] with gt_ignore[i] ("###") is don't-care; a detection whose
///     intersection with some valid don't-care GT exceeds
///     kDontCareAreaFraction of its own area is don't-care (neither TP nor
///     FP);
///  3. greedy one-to-one matching, GT-major then detection order: (g, d)
///     match when both are unmatched and care and polygon_iou > iou_thresh
///     (strictly).
/// Throws std::invalid_argument when gt_ignore.size() != gt.size().
EvalCounts match_image(const std::vector<Polygon>& gt,
                       const std::vector<bool>& gt_ignore,
                       const std::vector<Polygon>& det,
                       double iou_thresh = 0.5);

/// Dataset-level P/R/H from the summed counts, as the official script's
/// combine_results: recall = Σmatched/Σgt, precision = Σmatched/Σdet,
/// hmean = 2PR/(P+R). A zero denominator gives 0 for that metric (so no GT
/// and no detections at all gives P = R = H = 0); the official per-image
/// convention (recall 1 without GT) is not used because papers report these
/// dataset-level numbers.
EvalResult summarize(const std::vector<EvalCounts>& per_image);

}  // namespace dbh::model
