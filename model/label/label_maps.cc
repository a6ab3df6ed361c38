#include "model/label/label_maps.h"

#include <algorithm>
#include <cmath>
#include <opencv2/imgproc.hpp>
#include <sstream>
#include <stdexcept>
#include <string>

#include "model/label/shrink.h"

namespace dbh::model {
namespace {

// Vertices closer than this are one vertex (spec §11 item 3: a repeated
// vertex is a zero-length edge).
constexpr double kDuplicateEps = 1e-6;
// [DB] validate_polygons: |area| below one square pixel is ignored.
constexpr double kMinArea = 1.0;

void check_options(int height, int width, const LabelMapOptions& o) {
  std::ostringstream err;
  if (height < 0 || width < 0) {
    err << "make_label_maps: expected a non-negative size, got " << height
        << "x" << width;
  } else if (!(o.shrink_ratio >= 0.0 && o.shrink_ratio <= 1.0)) {
    err << "make_label_maps: shrink_ratio: expected a value in [0, 1], got "
        << o.shrink_ratio;
  } else if (!(0.0 <= o.thresh_min && o.thresh_min <= o.thresh_max &&
               o.thresh_max <= 1.0)) {
    err << "make_label_maps: thresh_min/thresh_max: expected "
           "0 <= thresh_min <= thresh_max <= 1, got "
        << o.thresh_min << " and " << o.thresh_max;
  } else if (!std::isfinite(o.min_text_size)) {
    err << "make_label_maps: min_text_size: expected a finite value, got "
        << o.min_text_size;
  } else {
    return;
  }
  throw std::invalid_argument(err.str());
}

bool has_nan(const Polygon& poly) {
  return std::any_of(poly.begin(), poly.end(), [](const Point& p) {
    return std::isnan(p.x) || std::isnan(p.y);
  });
}

Polygon clip_to_image(const Polygon& poly, int height, int width) {
  const double max_x = width - 1;
  const double max_y = height - 1;
  Polygon out;
  out.reserve(poly.size());
  for (const Point& p : poly) {
    out.push_back({std::clamp(p.x, 0.0, max_x), std::clamp(p.y, 0.0, max_y)});
  }
  return out;
}

// [DB] draws the original outline with astype(np.int32): truncation.
std::vector<cv::Point> truncated(const Polygon& poly) {
  std::vector<cv::Point> out;
  out.reserve(poly.size());
  for (const Point& p : poly) {
    out.emplace_back(static_cast<int>(p.x), static_cast<int>(p.y));
  }
  return out;
}

// Offset results are drawn like Clipper's own integer output: rounded.
std::vector<cv::Point> rounded(const Polygon& poly) {
  std::vector<cv::Point> out;
  out.reserve(poly.size());
  for (const Point& p : poly) {
    out.emplace_back(static_cast<int>(std::lround(p.x)),
                     static_cast<int>(std::lround(p.y)));
  }
  return out;
}

void fill(cv::Mat& map, const std::vector<cv::Point>& pts, float value) {
  if (pts.empty()) return;
  const std::vector<std::vector<cv::Point>> polys{pts};
  cv::fillPoly(map, polys, cv::Scalar(value));
}

// canvas = max(canvas, 1 − min(1, dist(pixel, poly edges) / distance)) over
// the bounding box of `dilated` intersected with the image.
void draw_border(const Polygon& poly, const std::vector<cv::Point>& dilated,
                 double distance, cv::Mat& canvas) {
  if (dilated.empty() || poly.empty() || !(distance > 0.0)) return;
  int x0 = dilated[0].x, x1 = dilated[0].x;
  int y0 = dilated[0].y, y1 = dilated[0].y;
  for (const cv::Point& p : dilated) {
    x0 = std::min(x0, p.x);
    x1 = std::max(x1, p.x);
    y0 = std::min(y0, p.y);
    y1 = std::max(y1, p.y);
  }
  // Spec §11 item 5: index only the part of the box inside the image.
  x0 = std::max(x0, 0);
  y0 = std::max(y0, 0);
  x1 = std::min(x1, canvas.cols - 1);
  y1 = std::min(y1, canvas.rows - 1);
  if (x0 > x1 || y0 > y1) return;
  const size_t n = poly.size();
  for (int y = y0; y <= y1; ++y) {
    float* row = canvas.ptr<float>(y);
    for (int x = x0; x <= x1; ++x) {
      const Point p{static_cast<double>(x), static_cast<double>(y)};
      double dist = point_segment_distance(p, poly[n - 1], poly[0]);
      for (size_t i = 0; i + 1 < n; ++i) {
        dist = std::min(dist, point_segment_distance(p, poly[i], poly[i + 1]));
      }
      const double closeness = 1.0 - std::clamp(dist / distance, 0.0, 1.0);
      // std::isfinite guards the merge: a NaN must never reach the canvas.
      if (std::isfinite(closeness)) {
        row[x] = std::max(row[x], static_cast<float>(closeness));
      }
    }
  }
}

}  // namespace

double point_segment_distance(const Point& p, const Point& a, const Point& b) {
  const double dx = b.x - a.x;
  const double dy = b.y - a.y;
  const double len2 = dx * dx + dy * dy;
  double t = 0.0;
  if (len2 > 0.0) {
    t = std::clamp(((p.x - a.x) * dx + (p.y - a.y) * dy) / len2, 0.0, 1.0);
  }
  return std::hypot(p.x - (a.x + t * dx), p.y - (a.y + t * dy));
}

LabelMaps make_label_maps(const std::vector<TextInstance>& texts, int height,
                          int width, const LabelMapOptions& options) {
  check_options(height, width, options);
  LabelMaps maps;
  maps.gt_shrink = cv::Mat::zeros(height, width, CV_32FC1);
  maps.gt_shrink_mask = cv::Mat::ones(height, width, CV_32FC1);
  cv::Mat canvas = cv::Mat::zeros(height, width, CV_32FC1);
  maps.gt_thresh_mask = cv::Mat::zeros(height, width, CV_32FC1);
  if (height == 0 || width == 0) {
    maps.gt_thresh = cv::Mat::zeros(height, width, CV_32FC1);
    return maps;
  }

  // MakeSegDetectionData: validate, ignore, shrink. Kept polygons (clipped,
  // clockwise) and their D go on to the border map.
  struct Kept {
    Polygon poly;
    double distance;
  };
  std::vector<Kept> kept;
  for (const TextInstance& text : texts) {
    Polygon poly = remove_duplicate_vertices(text.polygon, kDuplicateEps);
    if (has_nan(poly)) continue;  // Nowhere to draw it; ignored.
    poly = remove_duplicate_vertices(clip_to_image(poly, height, width),
                                     kDuplicateEps);
    bool ignore = text.ignore || area(poly) < kMinArea;
    poly = to_clockwise(poly);
    if (!ignore) {
      const auto [min_x, max_x] = std::minmax_element(
          poly.begin(), poly.end(),
          [](const Point& a, const Point& b) { return a.x < b.x; });
      const auto [min_y, max_y] = std::minmax_element(
          poly.begin(), poly.end(),
          [](const Point& a, const Point& b) { return a.y < b.y; });
      const double extent = std::min(max_x->x - min_x->x, max_y->y - min_y->y);
      ignore = extent < options.min_text_size;
    }
    const double distance = shrink_distance(poly, options.shrink_ratio);
    std::vector<Polygon> shrunk;
    if (!ignore) {
      shrunk = offset_polygon(poly, -distance);
      ignore = shrunk.empty() || shrunk[0].empty();
    }
    if (ignore) {
      fill(maps.gt_shrink_mask, truncated(poly), 0.0f);
      continue;
    }
    // [DB] keeps piece 0 of a split result (spec §11 item 6).
    fill(maps.gt_shrink, rounded(shrunk[0]), 1.0f);
    kept.push_back({std::move(poly), distance});
  }

  // MakeBorderMap, for the texts still kept.
  for (const Kept& k : kept) {
    const std::vector<Polygon> dilated = offset_polygon(k.poly, k.distance);
    if (dilated.empty()) continue;
    const std::vector<cv::Point> outline = rounded(dilated[0]);
    fill(maps.gt_thresh_mask, outline, 1.0f);
    draw_border(k.poly, outline, k.distance, canvas);
  }

  const float lo = static_cast<float>(options.thresh_min);
  const float hi = static_cast<float>(options.thresh_max);
  const float span = hi - lo;
  maps.gt_thresh.create(height, width, CV_32FC1);
  for (int y = 0; y < height; ++y) {
    const float* c = canvas.ptr<float>(y);
    float* t = maps.gt_thresh.ptr<float>(y);
    for (int x = 0; x < width; ++x) {
      t[x] = std::clamp(c[x] * span + lo, lo, hi);
    }
  }
  return maps;
}

}  // namespace dbh::model
