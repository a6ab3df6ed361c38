#include "model/label/shrink.h"

#include <algorithm>
#include <cmath>
#include <polyclipping/clipper.hpp>

namespace dbh::model {
namespace {

constexpr double kMiterLimit = 2.0;
constexpr double kArcTolerancePx = 0.25;

bool is_offsettable(const Point& p) {
  return std::isfinite(p.x) && std::isfinite(p.y) &&
         std::fabs(p.x) <= kMaxOffsetCoordinate &&
         std::fabs(p.y) <= kMaxOffsetCoordinate;
}

ClipperLib::cInt to_clipper(double v) {
  return static_cast<ClipperLib::cInt>(std::llround(v * kOffsetScale));
}

}  // namespace

double shrink_distance(const Polygon& poly, double ratio) {
  const double a = area(poly);
  const double l = perimeter(poly);
  if (!(a > 0.0) || !(l > 0.0) || !std::isfinite(a) || !std::isfinite(l)) {
    return 0.0;
  }
  const double d = a * (1.0 - ratio * ratio) / l;
  return std::isfinite(d) ? d : 0.0;
}

std::vector<Polygon> offset_polygon(const Polygon& poly, double delta) {
  if (poly.size() < 3 || !std::isfinite(delta) ||
      std::fabs(delta) > kMaxOffsetCoordinate ||
      !std::all_of(poly.begin(), poly.end(), is_offsettable)) {
    return {};
  }
  ClipperLib::Path path;
  path.reserve(poly.size());
  for (const Point& p : poly) {
    path.emplace_back(to_clipper(p.x), to_clipper(p.y));
  }
  ClipperLib::Paths solution;
  try {
    ClipperLib::ClipperOffset offset(kMiterLimit,
                                     kArcTolerancePx * kOffsetScale);
    offset.AddPath(path, ClipperLib::jtRound, ClipperLib::etClosedPolygon);
    offset.Execute(solution, delta * kOffsetScale);
  } catch (...) {
    // Clipper throws clipperException (range errors) and may throw
    // std::bad_alloc; both mean "no usable offset" to callers.
    return {};
  }
  std::vector<Polygon> pieces;
  pieces.reserve(solution.size());
  for (const ClipperLib::Path& piece : solution) {
    Polygon out;
    out.reserve(piece.size());
    for (const ClipperLib::IntPoint& q : piece) {
      out.push_back({static_cast<double>(q.X) / kOffsetScale,
                     static_cast<double>(q.Y) / kOffsetScale});
    }
    pieces.push_back(std::move(out));
  }
  return pieces;
}

Polygon remove_duplicate_vertices(const Polygon& poly, double eps) {
  const auto close = [eps](const Point& a, const Point& b) {
    return std::hypot(a.x - b.x, a.y - b.y) <= eps;
  };
  Polygon out;
  out.reserve(poly.size());
  for (const Point& p : poly) {
    if (out.empty() || !close(out.back(), p)) out.push_back(p);
  }
  while (out.size() > 1 && close(out.back(), out.front())) out.pop_back();
  return out;
}

Polygon to_clockwise(const Polygon& poly) {
  Polygon out = poly;
  if (signed_area(out) < 0.0) std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace dbh::model
