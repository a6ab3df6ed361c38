#include "model/eval/postprocess.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <opencv2/imgproc.hpp>
#include <stdexcept>
#include <string>

#include "model/label/shrink.h"

namespace dbh::model {
namespace {

struct MiniBox {
  Polygon corners;  // [tl, tr, br, bl]
  double short_side = 0;
};

// [DB] get_mini_boxes: boxPoints sorted by x (stably, like Python's sorted);
// of the two leftmost the upper is top-left, of the two rightmost the upper
// is top-right. For a rectangle this order is always clockwise in image
// coordinates.
template <typename P>
MiniBox mini_box(const std::vector<P>& points) {
  const cv::RotatedRect rect = cv::minAreaRect(points);
  std::array<cv::Point2f, 4> v;
  rect.points(v.data());
  std::stable_sort(v.begin(), v.end(),
                   [](const cv::Point2f& a, const cv::Point2f& b) {
                     return a.x < b.x;
                   });
  const bool left_swapped = !(v[1].y > v[0].y);
  const bool right_swapped = !(v[3].y > v[2].y);
  const cv::Point2f& tl = left_swapped ? v[1] : v[0];
  const cv::Point2f& bl = left_swapped ? v[0] : v[1];
  const cv::Point2f& tr = right_swapped ? v[3] : v[2];
  const cv::Point2f& br = right_swapped ? v[2] : v[3];
  MiniBox out;
  for (const cv::Point2f& p : {tl, tr, br, bl}) {
    out.corners.push_back({static_cast<double>(p.x), static_cast<double>(p.y)});
  }
  out.short_side = std::min(rect.size.width, rect.size.height);
  return out;
}

int clamped_index(double v, int hi) {
  // Clamp in double first so huge or non-finite values never reach the cast.
  if (!(v > 0.0)) return 0;
  if (v > static_cast<double>(hi)) return hi;
  return static_cast<int>(v);
}

// [DB] box_score_fast: mean of prob over the box filled into a mask the size
// of the box's (clipped) bounding box; vertices relative to the crop are
// truncated like numpy's astype(np.int32).
double box_score_fast(const cv::Mat& prob, const Polygon& box) {
  double x0 = box[0].x, x1 = box[0].x, y0 = box[0].y, y1 = box[0].y;
  for (const Point& p : box) {
    x0 = std::min(x0, p.x);
    x1 = std::max(x1, p.x);
    y0 = std::min(y0, p.y);
    y1 = std::max(y1, p.y);
  }
  const int xmin = clamped_index(std::floor(x0), prob.cols - 1);
  const int xmax = clamped_index(std::ceil(x1), prob.cols - 1);
  const int ymin = clamped_index(std::floor(y0), prob.rows - 1);
  const int ymax = clamped_index(std::ceil(y1), prob.rows - 1);
  const cv::Rect roi(xmin, ymin, xmax - xmin + 1, ymax - ymin + 1);
  cv::Mat mask = cv::Mat::zeros(roi.size(), CV_8UC1);
  std::vector<cv::Point> pts;
  pts.reserve(box.size());
  for (const Point& p : box) {
    pts.emplace_back(static_cast<int>(p.x - xmin), static_cast<int>(p.y - ymin));
  }
  cv::fillPoly(mask, std::vector<std::vector<cv::Point>>{pts}, cv::Scalar(1));
  return cv::mean(prob(roi), mask)[0];
}

void check_options(const PostprocessOptions& o) {
  const auto fail = [](const std::string& what) {
    throw std::invalid_argument("boxes_from_prob_map: " + what);
  };
  if (!std::isfinite(o.binarize_thresh)) fail("binarize_thresh must be finite");
  if (!std::isfinite(o.box_thresh)) fail("box_thresh must be finite");
  if (!std::isfinite(o.unclip_ratio) || o.unclip_ratio < 0.0) {
    fail("unclip_ratio must be finite and >= 0, got " +
         std::to_string(o.unclip_ratio));
  }
  if (o.max_candidates < 0) {
    fail("max_candidates must be >= 0, got " +
         std::to_string(o.max_candidates));
  }
  if (!std::isfinite(o.min_size)) fail("min_size must be finite");
}

}  // namespace

std::vector<Detection> boxes_from_prob_map(const cv::Mat& prob, double scale,
                                           int orig_width, int orig_height,
                                           const PostprocessOptions& options) {
  check_options(options);
  if (!std::isfinite(scale) || !(scale > 0.0)) {
    throw std::invalid_argument(
        "boxes_from_prob_map: expected a finite positive scale, got " +
        std::to_string(scale));
  }
  if (orig_width < 0 || orig_height < 0) {
    throw std::invalid_argument(
        "boxes_from_prob_map: expected non-negative original sizes, got " +
        std::to_string(orig_width) + "x" + std::to_string(orig_height));
  }
  if (prob.empty()) return {};
  if (prob.type() != CV_32FC1) {
    throw std::invalid_argument(
        "boxes_from_prob_map: expected a CV_32FC1 probability map, got type " +
        std::to_string(prob.type()));
  }

  cv::Mat bitmap;  // CV_8UC1, 255 where prob > binarize_thresh (NaN: 0).
  cv::compare(prob, cv::Scalar(options.binarize_thresh), bitmap, cv::CMP_GT);
  std::vector<std::vector<cv::Point>> contours;
  cv::findContours(bitmap, contours, cv::RETR_LIST, cv::CHAIN_APPROX_SIMPLE);

  const std::size_t n = std::min(
      contours.size(), static_cast<std::size_t>(options.max_candidates));
  std::vector<Detection> detections;
  for (std::size_t i = 0; i < n; ++i) {
    const MiniBox box = mini_box(contours[i]);
    if (!(box.short_side >= options.min_size)) continue;
    const double score = box_score_fast(prob, box.corners);
    // Written so that a NaN score (NaN probabilities in the box) is dropped.
    if (!(score >= options.box_thresh)) continue;

    const double length = perimeter(box.corners);
    if (!(length > 0.0)) continue;
    const double distance = area(box.corners) * options.unclip_ratio / length;
    // [DB] reshapes every piece's vertices into one point set; a convex box
    // yields one piece anyway.
    std::vector<cv::Point2f> expanded;
    for (const Polygon& piece : offset_polygon(box.corners, distance)) {
      for (const Point& p : piece) {
        expanded.emplace_back(static_cast<float>(p.x), static_cast<float>(p.y));
      }
    }
    if (expanded.empty()) continue;
    const MiniBox unclipped = mini_box(expanded);
    if (!(unclipped.short_side >= options.min_size + 2)) continue;

    Detection det;
    det.score = score;
    det.polygon.reserve(4);
    for (const Point& p : unclipped.corners) {
      det.polygon.push_back(
          {std::clamp(p.x / scale, 0.0, static_cast<double>(orig_width)),
           std::clamp(p.y / scale, 0.0, static_cast<double>(orig_height))});
    }
    detections.push_back(std::move(det));
  }
  return detections;
}

}  // namespace dbh::model
