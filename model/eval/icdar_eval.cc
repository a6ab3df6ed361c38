#include "model/eval/icdar_eval.h"

#include <algorithm>
#include <cmath>
#include <polyclipping/clipper.hpp>
#include <stdexcept>
#include <string>

namespace dbh::model {
namespace {

using ClipperLib::cInt;
using ClipperLib::IntPoint;
using ClipperLib::Path;

// A polygon converted once for evaluation: scaled integer ring without
// consecutive repeats, its area (px²) and integer bounding box.
struct EvalPolygon {
  Path path;
  bool valid = false;
  double area = 0;
  cInt x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

// Exact for |coordinates| ≤ 2^28 (kMaxEvalCoordinate·kEvalScale): each
// product is below 2^59.
int64_t cross(const IntPoint& o, const IntPoint& a, const IntPoint& b) {
  return (a.X - o.X) * (b.Y - o.Y) - (a.Y - o.Y) * (b.X - o.X);
}

int sign(int64_t v) { return (v > 0) - (v < 0); }

// p is on segment ab, given that o, a, b are collinear.
bool on_segment(const IntPoint& a, const IntPoint& b, const IntPoint& p) {
  return std::min(a.X, b.X) <= p.X && p.X <= std::max(a.X, b.X) &&
         std::min(a.Y, b.Y) <= p.Y && p.Y <= std::max(a.Y, b.Y);
}

// Closed segments ab and cd share at least one point.
bool segments_meet(const IntPoint& a, const IntPoint& b, const IntPoint& c,
                   const IntPoint& d) {
  const int d1 = sign(cross(a, b, c));
  const int d2 = sign(cross(a, b, d));
  const int d3 = sign(cross(c, d, a));
  const int d4 = sign(cross(c, d, b));
  if (d1 != d2 && d3 != d4 && d1 != 0 && d2 != 0 && d3 != 0 && d4 != 0) {
    return true;
  }
  return (d1 == 0 && on_segment(a, b, c)) || (d2 == 0 && on_segment(a, b, d)) ||
         (d3 == 0 && on_segment(c, d, a)) || (d4 == 0 && on_segment(c, d, b));
}

// Consecutive edges (a, b) and (b, c) overlap beyond b: c turns straight
// back along ab.
bool folds_back(const IntPoint& a, const IntPoint& b, const IntPoint& c) {
  if (cross(a, b, c) != 0) return false;
  return (a.X - b.X) * (c.X - b.X) + (a.Y - b.Y) * (c.Y - b.Y) > 0;
}

bool is_simple_ring(const Path& p) {
  const std::size_t n = p.size();
  for (std::size_t i = 0; i < n; ++i) {
    const IntPoint& a = p[i];
    const IntPoint& b = p[(i + 1) % n];
    if (folds_back(a, b, p[(i + 2) % n])) return false;
    for (std::size_t j = i + 2; j < n; ++j) {
      if (i == 0 && j == n - 1) continue;  // Adjacent through the closing edge.
      if (segments_meet(a, b, p[j], p[(j + 1) % n])) return false;
    }
  }
  return true;
}

EvalPolygon prepare(const Polygon& poly) {
  EvalPolygon out;
  for (const Point& q : poly) {
    if (!std::isfinite(q.x) || !std::isfinite(q.y) ||
        std::fabs(q.x) > kMaxEvalCoordinate ||
        std::fabs(q.y) > kMaxEvalCoordinate) {
      return out;
    }
    const IntPoint ip(static_cast<cInt>(std::llround(q.x * kEvalScale)),
                      static_cast<cInt>(std::llround(q.y * kEvalScale)));
    if (out.path.empty() || !(out.path.back() == ip)) out.path.push_back(ip);
  }
  while (out.path.size() > 1 && out.path.back() == out.path.front()) {
    out.path.pop_back();
  }
  if (out.path.size() < 3) return out;
  out.area = std::fabs(ClipperLib::Area(out.path)) / (kEvalScale * kEvalScale);
  if (!(out.area > 0.0) || !is_simple_ring(out.path)) return out;
  out.x0 = out.x1 = out.path[0].X;
  out.y0 = out.y1 = out.path[0].Y;
  for (const IntPoint& ip : out.path) {
    out.x0 = std::min(out.x0, ip.X);
    out.x1 = std::max(out.x1, ip.X);
    out.y0 = std::min(out.y0, ip.Y);
    out.y1 = std::max(out.y1, ip.Y);
  }
  out.valid = true;
  return out;
}

double intersection_area(const EvalPolygon& a, const EvalPolygon& b) {
  if (!a.valid || !b.valid) return 0.0;
  if (a.x1 <= b.x0 || b.x1 <= a.x0 || a.y1 <= b.y0 || b.y1 <= a.y0) {
    return 0.0;  // Bounding boxes meet at most along an edge.
  }
  ClipperLib::Paths solution;
  try {
    ClipperLib::Clipper clipper;
    clipper.AddPath(a.path, ClipperLib::ptSubject, true);
    clipper.AddPath(b.path, ClipperLib::ptClip, true);
    clipper.Execute(ClipperLib::ctIntersection, solution,
                    ClipperLib::pftNonZero, ClipperLib::pftNonZero);
  } catch (...) {
    return 0.0;  // Clipper range errors or allocation failure.
  }
  // Outer rings come back with positive area, holes with negative.
  double sum = 0.0;
  for (const Path& piece : solution) sum += ClipperLib::Area(piece);
  const double inter = sum / (kEvalScale * kEvalScale);
  return std::clamp(inter, 0.0, std::min(a.area, b.area));
}

double iou(const EvalPolygon& a, const EvalPolygon& b) {
  const double inter = intersection_area(a, b);
  const double uni = a.area + b.area - inter;
  if (!(uni > 0.0)) return 0.0;
  return std::clamp(inter / uni, 0.0, 1.0);
}

double ratio_or_zero(int64_t num, int64_t den) {
  return den == 0 ? 0.0 : static_cast<double>(num) / static_cast<double>(den);
}

}  // namespace

bool is_valid_polygon(const Polygon& poly) { return prepare(poly).valid; }

double polygon_intersection_area(const Polygon& a, const Polygon& b) {
  return intersection_area(prepare(a), prepare(b));
}

double polygon_iou(const Polygon& a, const Polygon& b) {
  return iou(prepare(a), prepare(b));
}

EvalCounts match_image(const std::vector<Polygon>& gt,
                       const std::vector<bool>& gt_ignore,
                       const std::vector<Polygon>& det, double iou_thresh) {
  if (gt_ignore.size() != gt.size()) {
    throw std::invalid_argument(
        "match_image: expected one gt_ignore flag per ground truth (" +
        std::to_string(gt.size()) + "), got " +
        std::to_string(gt_ignore.size()));
  }
  std::vector<EvalPolygon> gts;
  std::vector<bool> gt_care;
  for (std::size_t i = 0; i < gt.size(); ++i) {
    EvalPolygon p = prepare(gt[i]);
    if (!p.valid) continue;
    gts.push_back(std::move(p));
    gt_care.push_back(!gt_ignore[i]);
  }
  std::vector<EvalPolygon> dets;
  for (const Polygon& d : det) {
    EvalPolygon p = prepare(d);
    if (!p.valid) continue;
    bool dont_care = false;
    for (std::size_t g = 0; g < gts.size() && !dont_care; ++g) {
      if (gt_care[g]) continue;
      dont_care =
          intersection_area(gts[g], p) / p.area > kDontCareAreaFraction;
    }
    if (!dont_care) dets.push_back(std::move(p));
  }

  EvalCounts counts;
  counts.gt = std::count(gt_care.begin(), gt_care.end(), true);
  counts.det = static_cast<int64_t>(dets.size());
  std::vector<bool> det_matched(dets.size(), false);
  for (std::size_t g = 0; g < gts.size(); ++g) {
    if (!gt_care[g]) continue;
    for (std::size_t d = 0; d < dets.size(); ++d) {
      if (det_matched[d]) continue;
      if (iou(gts[g], dets[d]) > iou_thresh) {
        det_matched[d] = true;
        ++counts.matched;
        break;  // This GT is matched; go on with the next one.
      }
    }
  }
  return counts;
}

EvalResult summarize(const std::vector<EvalCounts>& per_image) {
  EvalResult r;
  for (const EvalCounts& c : per_image) {
    r.counts.gt += c.gt;
    r.counts.det += c.det;
    r.counts.matched += c.matched;
  }
  r.recall = ratio_or_zero(r.counts.matched, r.counts.gt);
  r.precision = ratio_or_zero(r.counts.matched, r.counts.det);
  const double sum = r.precision + r.recall;
  r.hmean = sum > 0.0 ? 2.0 * r.precision * r.recall / sum : 0.0;
  return r;
}

}  // namespace dbh::model
