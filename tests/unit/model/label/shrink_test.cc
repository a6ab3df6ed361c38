#include "model/label/shrink.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace dbh::model {
namespace {

struct Box {
  double x0, y0, x1, y1;
};

Box bounds(const Polygon& poly) {
  Box b{poly[0].x, poly[0].y, poly[0].x, poly[0].y};
  for (const Point& p : poly) {
    b.x0 = std::min(b.x0, p.x);
    b.y0 = std::min(b.y0, p.y);
    b.x1 = std::max(b.x1, p.x);
    b.y1 = std::max(b.y1, p.y);
  }
  return b;
}

const Polygon kRect{{0, 0}, {100, 0}, {100, 20}, {0, 20}};
constexpr double kUnit = 1.0 / kOffsetScale;

TEST(ShrinkDistanceTest, RectangleMatchesAppendixB) {
  EXPECT_DOUBLE_EQ(shrink_distance(kRect, 0.4), 7.0);
  EXPECT_DOUBLE_EQ(shrink_distance(kRect, 0.0), 2000.0 / 240.0);
}

TEST(ShrinkDistanceTest, DegenerateInputGivesZero) {
  EXPECT_EQ(shrink_distance(Polygon{}, 0.4), 0.0);
  EXPECT_EQ(shrink_distance(Polygon{{1, 1}, {5, 5}}, 0.4), 0.0);
  EXPECT_EQ(shrink_distance(Polygon{{0, 0}, {1, 1}, {2, 2}}, 0.4), 0.0);
  EXPECT_EQ(shrink_distance(Polygon{{3, 3}, {3, 3}, {3, 3}}, 0.4), 0.0);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(shrink_distance(Polygon{{0, 0}, {nan, 0}, {0, 5}}, 0.4), 0.0);
}

TEST(OffsetPolygonTest, ShrinkRectangleTo86By6) {
  const std::vector<Polygon> pieces = offset_polygon(kRect, -7.0);
  ASSERT_EQ(pieces.size(), 1u);
  const Box b = bounds(pieces[0]);
  EXPECT_NEAR(b.x0, 7.0, kUnit);
  EXPECT_NEAR(b.y0, 7.0, kUnit);
  EXPECT_NEAR(b.x1, 93.0, kUnit);
  EXPECT_NEAR(b.y1, 13.0, kUnit);
  EXPECT_NEAR(area(pieces[0]), 86.0 * 6.0, 0.5);
}

TEST(OffsetPolygonTest, DilateRectangleTo114By34WithRoundCorners) {
  const std::vector<Polygon> pieces = offset_polygon(kRect, 7.0);
  ASSERT_EQ(pieces.size(), 1u);
  const Box b = bounds(pieces[0]);
  EXPECT_NEAR(b.x0, -7.0, 0.05);
  EXPECT_NEAR(b.y0, -7.0, 0.05);
  EXPECT_NEAR(b.x1, 107.0, 0.05);
  EXPECT_NEAR(b.y1, 27.0, 0.05);
  // Rectangle + sides pushed out + four quarter circles of radius 7; the arc
  // tolerance (0.25 px) bounds the polygonal approximation's deficit.
  const double exact = 2000.0 + 240.0 * 7.0 + M_PI * 49.0;
  EXPECT_NEAR(area(pieces[0]), exact, 0.25 * 2 * M_PI * 7.0);
  EXPECT_GT(pieces[0].size(), 8u);  // Corners are rounded, not mitred.
}

TEST(OffsetPolygonTest, OuterPiecesAreClockwiseWhateverTheInputOrder) {
  Polygon ccw(kRect.rbegin(), kRect.rend());
  ASSERT_LT(signed_area(ccw), 0.0);
  for (double delta : {-7.0, 7.0}) {
    const std::vector<Polygon> a = offset_polygon(kRect, delta);
    const std::vector<Polygon> b = offset_polygon(ccw, delta);
    ASSERT_EQ(a.size(), 1u);
    ASSERT_EQ(b.size(), 1u);
    EXPECT_GT(signed_area(a[0]), 0.0);
    EXPECT_GT(signed_area(b[0]), 0.0);
    EXPECT_NEAR(area(a[0]), area(b[0]), 1e-9);
  }
}

TEST(OffsetPolygonTest, KeepsSubPixelPrecision) {
  // Truncating to whole pixels first (as pyclipper users do) would put the
  // shrunk box at x = 7; scaling by 2^8 keeps the half pixel.
  const Polygon half{{0.5, 0.5}, {100.5, 0.5}, {100.5, 20.5}, {0.5, 20.5}};
  const std::vector<Polygon> pieces = offset_polygon(half, -7.0);
  ASSERT_EQ(pieces.size(), 1u);
  const Box b = bounds(pieces[0]);
  EXPECT_NEAR(b.x0, 7.5, kUnit);
  EXPECT_NEAR(b.y1, 13.5, kUnit);
}

TEST(OffsetPolygonTest, ShrinkingPastTheInradiusRemovesThePolygon) {
  EXPECT_TRUE(offset_polygon(kRect, -10.5).empty());
  EXPECT_EQ(offset_polygon(kRect, -9.5).size(), 1u);
}

TEST(OffsetPolygonTest, ShrinkingADumbbellSplitsIt) {
  // Two 40×40 squares joined by a 40×4 neck.
  const Polygon dumbbell{{0, 0},   {40, 0},  {40, 18},  {80, 18},
                         {80, 0},  {120, 0}, {120, 40}, {80, 40},
                         {80, 22}, {40, 22}, {40, 40},  {0, 40}};
  const double d = shrink_distance(dumbbell, 0.4);
  ASSERT_GT(d, 2.0);
  EXPECT_EQ(offset_polygon(dumbbell, -d).size(), 2u);
}

TEST(OffsetPolygonTest, InvalidInputGivesNoPieces) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(offset_polygon(Polygon{{0, 0}, {5, 5}}, 1.0).empty());
  EXPECT_TRUE(offset_polygon(Polygon{{0, 0}, {nan, 0}, {0, 5}}, 1.0).empty());
  EXPECT_TRUE(offset_polygon(Polygon{{0, 0}, {inf, 0}, {0, 5}}, 1.0).empty());
  EXPECT_TRUE(offset_polygon(Polygon{{0, 0}, {1e30, 0}, {0, 5}}, 1.0).empty());
  EXPECT_TRUE(offset_polygon(kRect, nan).empty());
  EXPECT_TRUE(offset_polygon(kRect, 1e30).empty());
  EXPECT_TRUE(offset_polygon(Polygon{{0, 0}, {1, 1}, {2, 2}}, -1.0).empty());
}

TEST(RemoveDuplicateVerticesTest, DropsConsecutiveAndClosingRepeats) {
  const Polygon poly{{0, 0}, {0, 0}, {10, 0}, {10, 0}, {10, 10}, {0, 0}};
  const Polygon out = remove_duplicate_vertices(poly, 0.0);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[1].x, 10.0);
  EXPECT_EQ(out[2].y, 10.0);
}

TEST(RemoveDuplicateVerticesTest, EpsilonMergesNearVertices) {
  const Polygon poly{{0, 0}, {1e-7, 0}, {10, 0}, {10, 10}};
  EXPECT_EQ(remove_duplicate_vertices(poly, 0.0).size(), 4u);
  EXPECT_EQ(remove_duplicate_vertices(poly, 1e-6).size(), 3u);
  EXPECT_EQ(remove_duplicate_vertices(Polygon{{1, 1}, {1, 1}}, 0.0).size(), 1u);
  EXPECT_TRUE(remove_duplicate_vertices(Polygon{}, 0.0).empty());
}

TEST(ToClockwiseTest, ReversesCounterClockwiseOnly) {
  const Polygon ccw(kRect.rbegin(), kRect.rend());
  EXPECT_GT(signed_area(to_clockwise(ccw)), 0.0);
  const Polygon cw = to_clockwise(kRect);
  ASSERT_EQ(cw.size(), kRect.size());
  for (size_t i = 0; i < cw.size(); ++i) {
    EXPECT_EQ(cw[i].x, kRect[i].x);
    EXPECT_EQ(cw[i].y, kRect[i].y);
  }
  EXPECT_EQ(to_clockwise(Polygon{{1, 2}, {3, 4}}).size(), 2u);
}

}  // namespace
}  // namespace dbh::model
