#include "model/label/polygon.h"

#include <cmath>

namespace dbh::model {

double signed_area(const Polygon& poly) {
  const size_t n = poly.size();
  if (n < 3) return 0.0;
  double twice = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const Point& a = poly[i];
    const Point& b = poly[(i + 1) % n];
    twice += a.x * b.y - b.x * a.y;
  }
  return 0.5 * twice;
}

double area(const Polygon& poly) { return std::fabs(signed_area(poly)); }

double perimeter(const Polygon& poly) {
  const size_t n = poly.size();
  if (n < 2) return 0.0;
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const Point& a = poly[i];
    const Point& b = poly[(i + 1) % n];
    sum += std::hypot(b.x - a.x, b.y - a.y);
  }
  return sum;
}

}  // namespace dbh::model
