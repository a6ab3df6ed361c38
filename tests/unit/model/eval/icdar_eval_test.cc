#include "model/eval/icdar_eval.h"

#include <gtest/gtest.h>

#include <limits>
#include <stdexcept>

namespace dbh::model {
namespace {

Polygon rect(double x0, double y0, double x1, double y1) {
  return {{x0, y0}, {x1, y0}, {x1, y1}, {x0, y1}};
}

TEST(PolygonIouTest, IdenticalDisjointAndHalfOverlap) {
  const Polygon a = rect(0, 0, 10, 10);
  EXPECT_DOUBLE_EQ(polygon_iou(a, a), 1.0);
  EXPECT_DOUBLE_EQ(polygon_iou(a, rect(20, 0, 30, 10)), 0.0);
  EXPECT_DOUBLE_EQ(polygon_iou(a, rect(10, 0, 20, 10)), 0.0);  // Touching.
  EXPECT_NEAR(polygon_iou(a, rect(5, 0, 15, 10)), 1.0 / 3.0, 1e-12);
  EXPECT_NEAR(polygon_intersection_area(a, rect(5, 0, 15, 10)), 50.0, 1e-12);
}

TEST(PolygonIouTest, OrientationAndRotationDoNotMatter) {
  const Polygon a = rect(0, 0, 10, 10);
  const Polygon ccw(a.rbegin(), a.rend());
  EXPECT_DOUBLE_EQ(polygon_iou(ccw, a), 1.0);
  // A diamond inscribed in the square covers half of it.
  const Polygon diamond{{5, 0}, {10, 5}, {5, 10}, {0, 5}};
  EXPECT_NEAR(polygon_iou(a, diamond), 0.5, 1e-12);
}

TEST(PolygonIouTest, InvalidPolygonsGiveZero) {
  const Polygon square = rect(0, 0, 10, 10);
  const Polygon bowtie{{0, 0}, {10, 10}, {10, 0}, {0, 10}};
  EXPECT_FALSE(is_valid_polygon(bowtie));
  EXPECT_EQ(polygon_iou(square, bowtie), 0.0);
  EXPECT_EQ(polygon_iou(bowtie, bowtie), 0.0);
  EXPECT_FALSE(is_valid_polygon(Polygon{{0, 0}, {5, 5}}));
  EXPECT_FALSE(is_valid_polygon(Polygon{{0, 0}, {5, 5}, {10, 10}}));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(is_valid_polygon(Polygon{{0, 0}, {nan, 0}, {0, 5}}));
  // Self-touching at a vertex is invalid in Shapely too.
  EXPECT_FALSE(is_valid_polygon(
      Polygon{{0, 0}, {10, 0}, {5, 5}, {10, 10}, {0, 10}, {5, 5}}));
  // A spike folding back along an edge.
  EXPECT_FALSE(is_valid_polygon(Polygon{{0, 0}, {10, 0}, {5, 0}, {5, 5}}));
  // Repeated vertices alone do not invalidate a polygon.
  EXPECT_TRUE(is_valid_polygon(
      Polygon{{0, 0}, {0, 0}, {10, 0}, {10, 10}, {0, 10}, {0, 0}}));
  EXPECT_TRUE(is_valid_polygon(Polygon{{0, 0}, {10, 0}, {10, 10}, {5, 2}}));
}

TEST(IcdarEvalTest, PerfectPredictionsScoreOne) {
  const std::vector<Polygon> gt{rect(0, 0, 50, 10), rect(0, 20, 30, 40)};
  const EvalCounts c = match_image(gt, {false, false}, gt);
  EXPECT_EQ(c.gt, 2);
  EXPECT_EQ(c.det, 2);
  EXPECT_EQ(c.matched, 2);
  const EvalResult r = summarize({c, c});
  EXPECT_DOUBLE_EQ(r.precision, 1.0);
  EXPECT_DOUBLE_EQ(r.recall, 1.0);
  EXPECT_DOUBLE_EQ(r.hmean, 1.0);
  EXPECT_EQ(r.counts.gt, 4);
}

TEST(IcdarEvalTest, IouThresholdIsStrict) {
  // Half of the GT: IoU exactly 0.5, which does not match.
  const EvalCounts c =
      match_image({rect(0, 0, 10, 10)}, {false}, {rect(0, 0, 5, 10)});
  EXPECT_EQ(c.matched, 0);
  EXPECT_EQ(c.det, 1);
  const EvalCounts d =
      match_image({rect(0, 0, 10, 10)}, {false}, {rect(0, 0, 5.1, 10)});
  EXPECT_EQ(d.matched, 1);
}

TEST(IcdarEvalTest, DontCareGroundTruthRemovesCoveredDetections) {
  const std::vector<Polygon> gt{rect(0, 0, 40, 10), rect(0, 50, 40, 60)};
  const std::vector<bool> ignore{false, true};
  // One hit, one detection inside the "###" region, one covering it only
  // partly (40% of its own area) which stays a false positive.
  const std::vector<Polygon> det{rect(0, 0, 40, 10), rect(2, 51, 38, 59),
                                 rect(0, 56, 40, 66)};
  const EvalCounts c = match_image(gt, ignore, det);
  EXPECT_EQ(c.gt, 1);
  EXPECT_EQ(c.det, 2);
  EXPECT_EQ(c.matched, 1);
  const EvalResult r = summarize({c});
  EXPECT_DOUBLE_EQ(r.recall, 1.0);
  EXPECT_DOUBLE_EQ(r.precision, 0.5);
  EXPECT_NEAR(r.hmean, 2.0 / 3.0, 1e-12);
}

TEST(IcdarEvalTest, DontCareGroundTruthIsNeverMatched) {
  const std::vector<Polygon> gt{rect(0, 0, 40, 10)};
  const EvalCounts c = match_image(gt, {true}, gt);
  EXPECT_EQ(c.gt, 0);
  EXPECT_EQ(c.det, 0);
  EXPECT_EQ(c.matched, 0);
}

TEST(IcdarEvalTest, MatchingIsOneToOne) {
  const std::vector<Polygon> gt{rect(0, 0, 40, 10)};
  const std::vector<Polygon> det{rect(0, 0, 40, 10), rect(1, 0, 40, 10)};
  const EvalCounts c = match_image(gt, {false}, det);
  EXPECT_EQ(c.gt, 1);
  EXPECT_EQ(c.det, 2);
  EXPECT_EQ(c.matched, 1);
  const EvalResult r = summarize({c});
  EXPECT_DOUBLE_EQ(r.precision, 0.5);
  EXPECT_DOUBLE_EQ(r.recall, 1.0);
}

TEST(IcdarEvalTest, GreedyOrderIsGtMajor) {
  // det 0 overlaps both GTs enough; GT 0 takes it first, GT 1 then takes
  // det 1.
  const std::vector<Polygon> gt{rect(0, 0, 10, 10), rect(1, 0, 11, 10)};
  const std::vector<Polygon> det{rect(0.5, 0, 10.5, 10), rect(1, 0, 11, 10)};
  EXPECT_EQ(match_image(gt, {false, false}, det).matched, 2);
}

TEST(IcdarEvalTest, InvalidPolygonsAreSkippedOnBothSides) {
  const Polygon bowtie{{0, 0}, {10, 10}, {10, 0}, {0, 10}};
  const EvalCounts c = match_image({bowtie, rect(20, 0, 30, 10)},
                                   {false, false}, {bowtie, rect(20, 0, 30, 10)});
  EXPECT_EQ(c.gt, 1);
  EXPECT_EQ(c.det, 1);
  EXPECT_EQ(c.matched, 1);
}

TEST(IcdarEvalTest, SummarizeFollowsCombineResultsForEmptyDenominators) {
  const EvalResult empty = summarize({});
  EXPECT_EQ(empty.precision, 0.0);
  EXPECT_EQ(empty.recall, 0.0);
  EXPECT_EQ(empty.hmean, 0.0);
  EvalCounts no_det;
  no_det.gt = 3;
  const EvalResult r = summarize({no_det, EvalCounts{}});
  EXPECT_EQ(r.recall, 0.0);
  EXPECT_EQ(r.precision, 0.0);
  EXPECT_EQ(r.hmean, 0.0);
  EXPECT_EQ(r.counts.gt, 3);
}

TEST(IcdarEvalTest, RejectsMismatchedIgnoreFlags) {
  EXPECT_THROW(match_image({rect(0, 0, 1, 1)}, {}, {}), std::invalid_argument);
}

}  // namespace
}  // namespace dbh::model
