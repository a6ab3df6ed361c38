#include "model/label/polygon.h"

#include <gtest/gtest.h>

namespace dbh::model {
namespace {

TEST(PolygonTest, RectangleAreaAndPerimeter) {
  const Polygon rect{{0, 0}, {100, 0}, {100, 20}, {0, 20}};
  EXPECT_DOUBLE_EQ(area(rect), 2000.0);
  EXPECT_DOUBLE_EQ(perimeter(rect), 240.0);
}

TEST(PolygonTest, SignedAreaIsPositiveForClockwiseInImageCoordinates) {
  // Clockwise on screen (y down): top-left, top-right, bottom-right, ...
  const Polygon cw{{0, 0}, {10, 0}, {10, 10}, {0, 10}};
  const Polygon ccw{{0, 0}, {0, 10}, {10, 10}, {10, 0}};
  EXPECT_GT(signed_area(cw), 0.0);
  EXPECT_LT(signed_area(ccw), 0.0);
}

TEST(PolygonTest, DegeneratePolygonsHaveZeroArea) {
  EXPECT_EQ(area(Polygon{}), 0.0);
  EXPECT_EQ(area(Polygon{{1, 1}, {2, 2}}), 0.0);
  EXPECT_EQ(area(Polygon{{0, 0}, {1, 1}, {2, 2}}), 0.0);
}

}  // namespace
}  // namespace dbh::model
