#pragma once

#include <opencv2/core/mat.hpp>
#include <vector>

#include "model/label/polygon.h"

namespace dbh::model {

/// ImageNet statistics of the training normalisation, RGB order, applied to
/// pixels scaled to [0, 1].
inline constexpr double kImageNetMean[3] = {0.485, 0.456, 0.406};
inline constexpr double kImageNetStd[3] = {0.229, 0.224, 0.225};

/// Draws ground truth (green, ignored GT in gray) and predictions (red),
/// 2 px anti-aliased outlines at 1/16 px precision, on a BGR 8-bit copy of
/// `image_bgr8` (CV_8UC3; CV_8UC1 is converted to BGR). `image_bgr8` itself
/// is not modified. Polygons with fewer than 2 vertices or a non-finite or
/// huge (> 2^20 px) coordinate are skipped. `gt_ignore` may be empty (no GT
/// ignored); otherwise it needs one flag per GT. Throws
/// std::invalid_argument for another image type or a gt_ignore size
/// mismatch; an empty image gives an empty Mat.
cv::Mat draw_overlay(const cv::Mat& image_bgr8, const std::vector<Polygon>& gt,
                     const std::vector<bool>& gt_ignore,
                     const std::vector<Polygon>& det);

/// Undoes the training normalisation: `normalised` is CV_32FC3 RGB with
/// ImageNet mean kImageNetMean and std kImageNetStd applied to [0, 1]
/// pixels; returns BGR CV_8UC3 (x·std + mean)·255, rounded and saturated;
/// NaN becomes 0. An empty input gives an empty Mat. Throws
/// std::invalid_argument for any other type.
cv::Mat denormalize_to_bgr8(const cv::Mat& normalised);

/// The seeds' symptom check: true when an 8-bit image (any channel count) is
/// (almost) all black, i.e. its mean over all channels is below 2 and its
/// maximum below 10, and for an empty image. Throws std::invalid_argument
/// for a non-8-bit image.
bool looks_all_black(const cv::Mat& bgr8);

}  // namespace dbh::model
