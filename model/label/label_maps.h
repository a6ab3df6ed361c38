#pragma once

#include <opencv2/core/mat.hpp>
#include <vector>

#include "model/label/polygon.h"

namespace dbh::model {

/// One text region of a training image, in image pixel coordinates.
struct TextInstance {
  Polygon polygon;
  /// "Don't care" region (ICDAR "###", UFO illegibility): masked out of the
  /// probability loss and given no threshold supervision.
  bool ignore = false;
};

/// Label-generation parameters ([DB] defaults, spec §4).
struct LabelMapOptions {
  /// r in D = A·(1 − r²)/L. Must lie in [0, 1].
  double shrink_ratio = 0.4;
  /// Threshold target far from (≥ D) any text border. Must lie in [0, 1].
  double thresh_min = 0.3;
  /// Threshold target on a text border. Must lie in [thresh_min, 1].
  double thresh_max = 0.7;
  /// Polygons whose axis-aligned extent is below this (px, in either
  /// direction) are ignored. Must be finite.
  double min_text_size = 8;
};

/// The four DBNet training targets ([DB] `gt`, `mask`, `thresh_map`,
/// `thresh_mask`). Each is CV_32FC1, height × width, every value finite.
struct LabelMaps {
  /// 1 inside the shrunk polygon G_s of every kept text, else 0.
  cv::Mat gt_shrink;
  /// 0 inside (the original outline of) every ignored text, else 1.
  cv::Mat gt_shrink_mask;
  /// In [thresh_min, thresh_max]: thresh_max on kept text borders, falling
  /// linearly to thresh_min at distance ≥ D from them.
  cv::Mat gt_thresh;
  /// 1 inside the dilated polygon G_d of every kept text, else 0.
  cv::Mat gt_thresh_mask;
};

/// Builds the label maps for one image, following spec §4 in [DB]
/// (MakeSegDetectionData, then MakeBorderMap) order. Per text:
///  1. consecutive duplicate vertices (within 1e-6 px) are dropped; a polygon
///     with a NaN coordinate is ignored and not drawn anywhere;
///  2. vertices are clipped to [0, width−1] × [0, height−1] (duplicates that
///     creates are dropped again); |area| < 1 → ignored; made clockwise;
///  3. ignored, or min(extent_x, extent_y) < min_text_size → the clipped
///     outline (vertices truncated to int, as [DB]'s astype(int32)) is filled
///     with 0 in gt_shrink_mask, and the text gets no threshold supervision;
///  4. otherwise shrunk by D = shrink_distance(poly, shrink_ratio) with
///     offset_polygon; no piece → ignored as in 3.; else piece 0 only is
///     filled with 1 in gt_shrink ([DB] behaviour: when shrinking splits a
///     concave text, the other pieces are dropped, neither positive nor
///     masked);
///  5. border map for the texts still kept: dilate by +D, piece 0 = G_d is
///     filled with 1 in gt_thresh_mask; over G_d's bounding box intersected
///     with the image, canvas = max(canvas, 1 − min(1, dist/D)) with dist the
///     exact distance from the pixel to the nearest edge of the clipped
///     polygon (zero-length edges measure to the endpoint);
///  6. gt_thresh = canvas·(thresh_max − thresh_min) + thresh_min.
/// Offset vertices are rounded to the nearest pixel for cv::fillPoly; pixel
/// (x, y) is the point (x, y). Degenerate geometry never yields NaN or Inf;
/// masks and gt_shrink are exactly 0 or 1. Throws std::invalid_argument for
/// negative sizes or options outside their documented ranges.
LabelMaps make_label_maps(const std::vector<TextInstance>& texts, int height,
                          int width, const LabelMapOptions& options = {});

/// Exact Euclidean distance from p to the segment ab; the distance to a when
/// a and b coincide. Finite for finite input.
double point_segment_distance(const Point& p, const Point& a, const Point& b);

}  // namespace dbh::model
