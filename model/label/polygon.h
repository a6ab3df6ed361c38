#pragma once

#include <vector>

namespace dbh::model {

/// A point in image coordinates (origin top-left, y down), in pixels.
struct Point {
  double x = 0;
  double y = 0;
};

/// A closed polygon; the last vertex connects back to the first.
using Polygon = std::vector<Point>;

/// Signed shoelace area: positive for clockwise polygons in image coordinates
/// (y down), negative for counter-clockwise ones.
double signed_area(const Polygon& poly);
/// |signed_area|.
double area(const Polygon& poly);
/// Sum of edge lengths, closing edge included.
double perimeter(const Polygon& poly);

}  // namespace dbh::model
