// Properties of label generation (spec §4): the shrink offset stays inside
// the text, and make_label_maps keeps every documented invariant of its four
// maps for any set of polygons, valid or degenerate.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <opencv2/core.hpp>
#include <string>
#include <vector>

#include "model/label/label_maps.h"
#include "model/label/polygon.h"
#include "model/label/shrink.h"

namespace dbh::model {
namespace {

// Uniform in [lo, hi) whatever the test case's size (rapidcheck's inRange
// scales the range with the size, so early cases would all sit at lo);
// shrinks towards lo.
template <typename T>
rc::Gen<T> uniform(T lo, T hi) {
  return rc::gen::resize(rc::kNominalSize, rc::gen::inRange<T>(lo, hi));
}

constexpr double kPi = 3.14159265358979323846;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

// Uniform in [lo, hi] with 1e-6 resolution (shrinks towards lo).
rc::Gen<double> gen_real(double lo, double hi) {
  return rc::gen::map(uniform(0, 1000001), [lo, hi](int v) {
    return lo + (hi - lo) * (static_cast<double>(v) / 1e6);
  });
}

// A simple star-shaped polygon around (cx, cy): 3..12 vertices at sorted
// angles, each angular gap below π (so every edge stays in its own wedge and
// no two edges cross), radii in [0.1, 1]·max_radius. Concave in general;
// either orientation.
rc::Gen<Polygon> gen_star(double cx, double cy, double max_radius) {
  return rc::gen::exec([=] {
    const int n = *uniform(3, 13);
    const double step = 2 * kPi / n;
    const double phase = *gen_real(0, 2 * kPi);
    const bool reversed = *rc::gen::arbitrary<bool>();
    Polygon poly;
    for (int i = 0; i < n; ++i) {
      // Jitter below 0.4 of a step: gaps stay in (0.6, 1.4)·step < π.
      const double angle = phase + (i + *gen_real(0, 0.39)) * step;
      const double r = max_radius * *gen_real(0.1, 1.0);
      poly.push_back({cx + r * std::cos(angle), cy + r * std::sin(angle)});
    }
    if (reversed) std::reverse(poly.begin(), poly.end());
    return poly;
  });
}

// A w×h rectangle centred on (cx, cy), rotated by a random angle; sides in
// [min_side, max_side].
rc::Gen<Polygon> gen_rotated_rect(double cx, double cy, double min_side,
                                  double max_side) {
  return rc::gen::exec([=] {
    const double w = *gen_real(min_side, max_side);
    const double h = *gen_real(min_side, max_side);
    const double a = *gen_real(0, kPi);
    const double c = std::cos(a), s = std::sin(a);
    Polygon poly;
    for (const auto& [u, v] : {std::pair{-0.5, -0.5}, std::pair{0.5, -0.5},
                               std::pair{0.5, 0.5}, std::pair{-0.5, 0.5}}) {
      const double x = u * w, y = v * h;
      poly.push_back({cx + c * x - s * y, cy + s * x + c * y});
    }
    return poly;
  });
}

// A valid simple polygon, either kind, of radius up to max_radius.
rc::Gen<Polygon> gen_simple_polygon(double cx, double cy, double max_radius) {
  return rc::gen::exec([=] {
    if (*rc::gen::arbitrary<bool>()) return *gen_star(cx, cy, max_radius);
    return *gen_rotated_rect(cx, cy, std::min(1.0, max_radius), max_radius * 1.4);
  });
}

struct Scene {
  int height = 0;
  int width = 0;
  std::vector<TextInstance> texts;
};

void show_polygon(const Polygon& p, std::ostream& os) {
  os << "[";
  for (const Point& q : p) os << "(" << q.x << ", " << q.y << ")";
  os << "]";
}

// rapidcheck prints counterexamples with showValue, found by ADL.
void showValue(const Scene& s, std::ostream& os) {
  os << s.height << "x" << s.width << " texts:";
  for (const TextInstance& t : s.texts) {
    os << "\n  ";
    show_polygon(t.polygon, os);
    if (t.ignore) os << " ignore";
  }
}

}  // namespace

// Polygons (std::vector<Point>) print through this.
void showValue(const Point& p, std::ostream& os) {
  os << "(" << p.x << ", " << p.y << ")";
}

namespace {

// Image 32..512 per side; 0..8 texts: whole, partly outside the image, or
// tiny (below min_text_size or below one square pixel); some ignored.
rc::Gen<Scene> gen_valid_scene() {
  return rc::gen::exec([] {
    Scene s;
    s.height = *uniform(32, 513);
    s.width = *uniform(32, 513);
    const int n = *uniform(0, 9);
    const double side = std::min(s.height, s.width);
    for (int i = 0; i < n; ++i) {
      const int kind = *uniform(0, 3);
      double cx = 0, cy = 0, radius = 0;
      if (kind == 0) {  // inside
        radius = *gen_real(8, side / 2);
        cx = *gen_real(radius, s.width - radius);
        cy = *gen_real(radius, s.height - radius);
      } else if (kind == 1) {  // partly (or wholly) outside
        radius = *gen_real(8, side);
        cx = *gen_real(-0.25 * s.width, 1.25 * s.width);
        cy = *gen_real(-0.25 * s.height, 1.25 * s.height);
      } else {  // tiny
        radius = *gen_real(0.2, 6);
        cx = *gen_real(0, s.width);
        cy = *gen_real(0, s.height);
      }
      TextInstance t;
      t.polygon = *gen_simple_polygon(cx, cy, radius);
      t.ignore = *uniform(0, 5) == 0;
      s.texts.push_back(std::move(t));
    }
    return s;
  });
}

// A coordinate from the awkward end of the range.
rc::Gen<double> gen_awkward_coordinate() {
  return rc::gen::element(0.0, -0.0, 1e-9, -1.0, 1e6, -1e6, 1e12, -1e12,
                          1.6777216e7, 1e18, -1e18, 1e300, -1e300, kInf, -kInf,
                          kNan, std::numeric_limits<double>::denorm_min(),
                          std::numeric_limits<double>::max(),
                          std::numeric_limits<double>::lowest());
}

// Degenerate text geometry: 0–2 points, collinear points, repeated vertices,
// all-equal points, near-duplicates just below and above the 1e-6 px
// duplicate tolerance, huge / infinite / NaN coordinates, huge polygons.
rc::Gen<Polygon> gen_degenerate_polygon(int height, int width) {
  return rc::gen::exec([=] {
    const double w = std::max(width, 1), h = std::max(height, 1);
    const auto point = [&] {
      return Point{*gen_real(-0.5 * w, 1.5 * w), *gen_real(-0.5 * h, 1.5 * h)};
    };
    Polygon poly;
    switch (*uniform(0, 8)) {
      case 0: {  // 0, 1 or 2 points
        const int n = *uniform(0, 3);
        for (int i = 0; i < n; ++i) poly.push_back(point());
        break;
      }
      case 1: {  // collinear, in any order along the line
        const Point a = point(), b = point();
        const int n = *uniform(3, 13);
        for (int i = 0; i < n; ++i) {
          const double t = *gen_real(-1, 2);
          poly.push_back({a.x + t * (b.x - a.x), a.y + t * (b.y - a.y)});
        }
        break;
      }
      case 2: {  // a valid polygon with every vertex repeated 1–3 times
        const Polygon base = *gen_simple_polygon(w / 2, h / 2, std::min(w, h) / 2);
        for (const Point& p : base) {
          const int k = *uniform(1, 4);
          for (int i = 0; i < k; ++i) poly.push_back(p);
        }
        break;
      }
      case 3: {  // one point, repeated
        const Point p = point();
        poly.assign(static_cast<size_t>(*uniform(1, 9)), p);
        break;
      }
      case 4: {  // near-duplicates around one point
        const Point p = point();
        const double eps = *rc::gen::element(1e-9, 1e-7, 9.9e-7, 1e-6, 1.1e-6, 1e-5, 0.5);
        const int n = *uniform(3, 9);
        for (int i = 0; i < n; ++i) {
          poly.push_back({p.x + eps * *gen_real(-1, 1), p.y + eps * *gen_real(-1, 1)});
        }
        break;
      }
      case 5: {  // a valid polygon with some coordinates replaced
        poly = *gen_simple_polygon(w / 2, h / 2, std::min(w, h) / 2);
        const int k = *uniform(1, 4);
        for (int i = 0; i < k; ++i) {
          const auto j = static_cast<size_t>(*uniform<int>(0, static_cast<int>(poly.size())));
          (*rc::gen::arbitrary<bool>() ? poly[j].x : poly[j].y) = *gen_awkward_coordinate();
        }
        break;
      }
      case 6: {  // a huge polygon around the image
        const double scale = *rc::gen::element(1e3, 1e6, 1e9, 1e15, 1e100, 1e300);
        poly = *gen_simple_polygon(0, 0, 1);
        for (Point& p : poly) {
          p.x = p.x * scale + w / 2;
          p.y = p.y * scale + h / 2;
        }
        break;
      }
      default: {  // arbitrary awkward points (self-intersecting too)
        const int n = *uniform(0, 9);
        for (int i = 0; i < n; ++i) {
          poly.push_back({*gen_awkward_coordinate(), *gen_awkward_coordinate()});
        }
        break;
      }
    }
    return poly;
  });
}

// Valid texts mixed with degenerate ones, on images from 0×0 up, with label
// options drawn from their documented ranges.
struct DegenerateCase {
  Scene scene;
  LabelMapOptions options;
};

void showValue(const DegenerateCase& c, std::ostream& os) {
  os << "shrink_ratio " << c.options.shrink_ratio << ", thresh ["
     << c.options.thresh_min << ", " << c.options.thresh_max
     << "], min_text_size " << c.options.min_text_size << ", ";
  showValue(c.scene, os);
}

rc::Gen<DegenerateCase> gen_degenerate_case() {
  return rc::gen::exec([] {
    DegenerateCase c;
    c.scene.height = *uniform(0, 97);
    c.scene.width = *uniform(0, 97);
    const int n = *uniform(1, 7);
    for (int i = 0; i < n; ++i) {
      TextInstance t;
      if (*uniform(0, 4) == 0) {
        const double side = std::max(1, std::min(c.scene.height, c.scene.width));
        t.polygon = *gen_simple_polygon(*gen_real(0, c.scene.width),
                                        *gen_real(0, c.scene.height),
                                        *gen_real(0.5, side));
      } else {
        t.polygon = *gen_degenerate_polygon(c.scene.height, c.scene.width);
      }
      t.ignore = *uniform(0, 5) == 0;
      c.scene.texts.push_back(std::move(t));
    }
    c.options.shrink_ratio = *rc::gen::oneOf(rc::gen::element(0.0, 0.4, 1.0), gen_real(0, 1));
    c.options.thresh_min = *rc::gen::oneOf(rc::gen::just(0.3), gen_real(0, 1));
    c.options.thresh_max =
        *rc::gen::oneOf(rc::gen::just(std::max(0.7, c.options.thresh_min)),
                        gen_real(c.options.thresh_min, 1));
    c.options.min_text_size = *rc::gen::oneOf(rc::gen::just(8.0), gen_real(-4, 20));
    return c;
  });
}

// Where a polygon's vertex lies relative to it: +1 inside, 0 on an edge
// (within `tol` px), −1 outside. Crossing-number test in double precision.
int locate(const Point& p, const Polygon& poly, double tol) {
  const size_t n = poly.size();
  double dist = std::numeric_limits<double>::infinity();
  bool inside = false;
  for (size_t i = 0, j = n - 1; i < n; j = i++) {
    const Point& a = poly[i];
    const Point& b = poly[j];
    dist = std::min(dist, point_segment_distance(p, a, b));
    if ((a.y > p.y) != (b.y > p.y) &&
        p.x < (b.x - a.x) * (p.y - a.y) / (b.y - a.y) + a.x) {
      inside = !inside;
    }
  }
  if (dist <= tol) return 0;
  return inside ? 1 : -1;
}

// Asserts every invariant make_label_maps documents for its output.
void check_maps(const LabelMaps& m, int height, int width,
                const LabelMapOptions& o) {
  const float lo = static_cast<float>(o.thresh_min);
  const float hi = static_cast<float>(o.thresh_max);
  for (const cv::Mat* map : {&m.gt_shrink, &m.gt_shrink_mask, &m.gt_thresh,
                             &m.gt_thresh_mask}) {
    RC_ASSERT(map->type() == CV_32FC1);
    RC_ASSERT(map->rows == height);
    RC_ASSERT(map->cols == width);
  }
  for (int y = 0; y < height; ++y) {
    const float* shrink = m.gt_shrink.ptr<float>(y);
    const float* shrink_mask = m.gt_shrink_mask.ptr<float>(y);
    const float* thresh = m.gt_thresh.ptr<float>(y);
    const float* thresh_mask = m.gt_thresh_mask.ptr<float>(y);
    for (int x = 0; x < width; ++x) {
      const auto fail = [&](const char* what, float v) {
        RC_FAIL(std::string(what) + " at pixel (" + std::to_string(x) + ", " +
                std::to_string(y) + "): " + std::to_string(v));
      };
      if (shrink[x] != 0.0f && shrink[x] != 1.0f) fail("gt_shrink not 0/1", shrink[x]);
      if (shrink_mask[x] != 0.0f && shrink_mask[x] != 1.0f) {
        fail("gt_shrink_mask not 0/1", shrink_mask[x]);
      }
      if (thresh_mask[x] != 0.0f && thresh_mask[x] != 1.0f) {
        fail("gt_thresh_mask not 0/1", thresh_mask[x]);
      }
      // Written so that NaN fails.
      if (!(thresh[x] >= lo && thresh[x] <= hi)) fail("gt_thresh out of range", thresh[x]);
    }
  }
}

RC_GTEST_PROP(LabelProp, ShrunkPiecesLieInsideTheTextAndAreSmaller, ()) {
  const int height = *uniform(32, 513);
  const int width = *uniform(32, 513);
  const double radius = *gen_real(2, std::min(height, width) / 2.0);
  const Polygon poly = *gen_simple_polygon(*gen_real(radius, width - radius),
                                           *gen_real(radius, height - radius), radius);
  const double d = shrink_distance(poly, 0.4);
  RC_ASSERT(d > 0.0);
  const std::vector<Polygon> pieces = offset_polygon(poly, -d);
  // Input and output vertices are rounded to 1/kOffsetScale px.
  const double tol = 4.0 / kOffsetScale;
  double total = 0;
  for (const Polygon& piece : pieces) {
    RC_ASSERT(piece.size() >= 3u);
    RC_ASSERT(signed_area(piece) > 0.0);  // outer pieces only: no holes
    total += area(piece);
    for (const Point& p : piece) {
      if (locate(p, poly, tol) < 0) {
        double dist = kInf;
        for (size_t i = 0; i < poly.size(); ++i) {
          dist = std::min(dist, point_segment_distance(p, poly[i], poly[(i + 1) % poly.size()]));
        }
        RC_FAIL("vertex (" + std::to_string(p.x) + ", " + std::to_string(p.y) +
                ") of a shrunk piece lies " + std::to_string(dist) +
                " px outside the text; D = " + std::to_string(d));
      }
    }
  }
  RC_ASSERT(total < area(poly));
  RC_TAG(pieces.empty() ? "vanished" : pieces.size() == 1 ? "one piece" : "split");
}

RC_GTEST_PROP(LabelProp, LabelMapsKeepTheirInvariantsForValidPolygons, ()) {
  const Scene s = *gen_valid_scene();
  const LabelMapOptions options;
  const LabelMaps m = make_label_maps(s.texts, s.height, s.width, options);
  check_maps(m, s.height, s.width, options);
  // G_s ⊂ G ⊂ G_d, D px apart on each side: every positive pixel is also
  // threshold-supervised. Not for a sliver: a text whose D is under half a
  // pixel (a vertex clamped onto the image's border, as [DB]'s
  // validate_polygons clamps, can fold a text into one: D = 0.11 px in one
  // found case; a quadrilateral 1 px wide and 52 px long is one too, D = 0.41
  // px), whose shrunk and dilated outlines, rounded to whole pixels like
  // [DB]'s, are rasterised differently.
  const bool clamped = std::any_of(s.texts.begin(), s.texts.end(), [&](const TextInstance& t) {
    return std::any_of(t.polygon.begin(), t.polygon.end(), [&](const Point& p) {
      return !(p.x >= 0 && p.x <= s.width - 1 && p.y >= 0 && p.y <= s.height - 1);
    });
  });
  const bool sliver = std::any_of(s.texts.begin(), s.texts.end(), [&](const TextInstance& t) {
    return shrink_distance(t.polygon, options.shrink_ratio) < 0.5;
  });
  const int stray = cv::countNonZero((m.gt_shrink != 0) & (m.gt_thresh_mask == 0));
  if (!clamped && !sliver) RC_ASSERT(stray == 0);
  RC_CLASSIFY(clamped, "a vertex clamped");
  RC_CLASSIFY(sliver, "a sliver under half a pixel");
  RC_CLASSIFY(cv::countNonZero(m.gt_shrink) > 0, "has positives");
}

RC_GTEST_PROP(LabelProp, LabelMapsNeverProduceNanForDegenerateInput, ()) {
  const DegenerateCase c = *gen_degenerate_case();
  const LabelMaps m =
      make_label_maps(c.scene.texts, c.scene.height, c.scene.width, c.options);
  check_maps(m, c.scene.height, c.scene.width, c.options);
}

}  // namespace
}  // namespace dbh::model
