#include "model/eval/postprocess.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <opencv2/imgproc.hpp>
#include <stdexcept>

#include "model/eval/icdar_eval.h"
#include "model/label/label_maps.h"

namespace dbh::model {
namespace {

// The 100×20 rectangle of spec §7.4 / Appendix B, placed inside a 64×160 map.
const Polygon kGt{{20, 20}, {120, 20}, {120, 40}, {20, 40}};

// P = 1 on the shrunk kernel G_s (≈ 86×6), 0 elsewhere.
cv::Mat kernel_map() {
  return make_label_maps({TextInstance{kGt, false}}, 64, 160).gt_shrink;
}

cv::Mat filled_rect(int rows, int cols, const cv::Rect& r, float value) {
  cv::Mat m = cv::Mat::zeros(rows, cols, CV_32FC1);
  m(r).setTo(value);
  return m;
}

TEST(PostprocessTest, AppendixBRoundTripWithUnclip15) {
  const std::vector<Detection> dets = boxes_from_prob_map(kernel_map(), 1.0, 160, 64);
  ASSERT_EQ(dets.size(), 1u);
  const Detection& d = dets[0];
  ASSERT_EQ(d.polygon.size(), 4u);
  EXPECT_DOUBLE_EQ(d.score, 1.0);
  for (const Point& p : d.polygon) {
    EXPECT_GT(p.x, 20.0);
    EXPECT_LT(p.x, 120.0);
    EXPECT_GT(p.y, 20.0);
    EXPECT_LT(p.y, 40.0);
  }
  // 94.4×14.4 / 100×20 (spec §7.4): under-recovery is expected.
  EXPECT_NEAR(polygon_iou(d.polygon, kGt), 0.68, 0.05);
  EXPECT_NEAR(area(d.polygon), 94.4 * 14.4, 30.0);
}

TEST(PostprocessTest, AppendixBRoundTripWithUnclip20) {
  PostprocessOptions options;
  options.unclip_ratio = 2.0;
  const std::vector<Detection> dets =
      boxes_from_prob_map(kernel_map(), 1.0, 160, 64, options);
  ASSERT_EQ(dets.size(), 1u);
  EXPECT_NEAR(polygon_iou(dets[0].polygon, kGt), 0.84, 0.05);
}

TEST(PostprocessTest, CornersAreClockwiseFromTopLeft) {
  const std::vector<Detection> dets = boxes_from_prob_map(kernel_map(), 1.0, 160, 64);
  ASSERT_EQ(dets.size(), 1u);
  const Polygon& p = dets[0].polygon;
  EXPECT_GT(signed_area(p), 0.0);
  EXPECT_LT(p[0].x, p[1].x);  // tl → tr
  EXPECT_LT(p[1].y, p[2].y);  // tr → br
  EXPECT_GT(p[2].x, p[3].x);  // br → bl
  EXPECT_GT(p[3].y, p[0].y);  // bl → tl
}

TEST(PostprocessTest, RotatedBoxStaysClockwise) {
  cv::Mat prob = cv::Mat::zeros(120, 120, CV_32FC1);
  const cv::RotatedRect rect({60, 60}, {70, 16}, 30);
  cv::Point2f v[4];
  rect.points(v);
  std::vector<cv::Point> pts;
  for (const cv::Point2f& q : v) pts.emplace_back(cvRound(q.x), cvRound(q.y));
  cv::fillPoly(prob, std::vector<std::vector<cv::Point>>{pts}, cv::Scalar(1));
  const std::vector<Detection> dets = boxes_from_prob_map(prob, 1.0, 120, 120);
  ASSERT_EQ(dets.size(), 1u);
  EXPECT_GT(signed_area(dets[0].polygon), 0.0);
  // Top-left is the upper of the two leftmost corners.
  const Polygon& p = dets[0].polygon;
  EXPECT_LE(p[0].x, p[2].x);
  EXPECT_LT(p[0].y, p[3].y);
}

TEST(PostprocessTest, ScaleMapsBackToOriginalCoordinates) {
  const cv::Mat prob = kernel_map();
  const std::vector<Detection> full = boxes_from_prob_map(prob, 1.0, 160, 64);
  // The map was produced from a 320×128 original resized by 0.5.
  const std::vector<Detection> half = boxes_from_prob_map(prob, 0.5, 320, 128);
  ASSERT_EQ(full.size(), 1u);
  ASSERT_EQ(half.size(), 1u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(half[0].polygon[i].x, 2.0 * full[0].polygon[i].x, 1e-9);
    EXPECT_NEAR(half[0].polygon[i].y, 2.0 * full[0].polygon[i].y, 1e-9);
  }
  EXPECT_DOUBLE_EQ(half[0].score, full[0].score);
}

TEST(PostprocessTest, PaddingIsIgnoredAndCoordinatesAreClamped) {
  // A text touching the right edge of a 100×40 original placed in a padded
  // 128×64 input: the unclipped box would leave the image and is clamped.
  const cv::Mat prob = filled_rect(64, 128, cv::Rect(60, 10, 40, 12), 1.0f);
  const std::vector<Detection> dets = boxes_from_prob_map(prob, 1.0, 100, 40);
  ASSERT_EQ(dets.size(), 1u);
  double max_x = 0;
  for (const Point& p : dets[0].polygon) {
    EXPECT_GE(p.x, 0.0);
    EXPECT_LE(p.x, 100.0);
    EXPECT_GE(p.y, 0.0);
    EXPECT_LE(p.y, 40.0);
    max_x = std::max(max_x, p.x);
  }
  EXPECT_DOUBLE_EQ(max_x, 100.0);
}

TEST(PostprocessTest, EmptyAndConstantMapsGiveNoDetections) {
  EXPECT_TRUE(boxes_from_prob_map(cv::Mat(), 1.0, 10, 10).empty());
  EXPECT_TRUE(
      boxes_from_prob_map(cv::Mat::zeros(32, 32, CV_32FC1), 1.0, 32, 32).empty());
  // Above binarize_thresh but below box_thresh everywhere.
  EXPECT_TRUE(boxes_from_prob_map(cv::Mat(32, 32, CV_32FC1, cv::Scalar(0.5)),
                                  1.0, 32, 32)
                  .empty());
}

TEST(PostprocessTest, ConstantOneMapGivesOneClampedBox) {
  const std::vector<Detection> dets = boxes_from_prob_map(
      cv::Mat(32, 48, CV_32FC1, cv::Scalar(1.0)), 1.0, 48, 32);
  ASSERT_EQ(dets.size(), 1u);
  EXPECT_DOUBLE_EQ(dets[0].score, 1.0);
  EXPECT_NEAR(area(dets[0].polygon), 48.0 * 32.0, 1e-6);
}

TEST(PostprocessTest, BoxThreshFiltersOnMeanProbability) {
  const cv::Mat prob = filled_rect(40, 80, cv::Rect(10, 10, 50, 10), 0.5f);
  EXPECT_TRUE(boxes_from_prob_map(prob, 1.0, 80, 40).empty());
  PostprocessOptions options;
  options.box_thresh = 0.4;
  const std::vector<Detection> dets =
      boxes_from_prob_map(prob, 1.0, 80, 40, options);
  ASSERT_EQ(dets.size(), 1u);
  EXPECT_NEAR(dets[0].score, 0.5, 1e-6);
}

TEST(PostprocessTest, SmallComponentsAreDropped) {
  // 3×3 pixels: minAreaRect of the pixel centres is 2×2 < min_size 3.
  const cv::Mat prob = filled_rect(20, 20, cv::Rect(5, 5, 3, 3), 1.0f);
  EXPECT_TRUE(boxes_from_prob_map(prob, 1.0, 20, 20).empty());
  PostprocessOptions options;
  options.min_size = 1;
  EXPECT_EQ(boxes_from_prob_map(prob, 1.0, 20, 20, options).size(), 1u);
}

TEST(PostprocessTest, MaxCandidatesCapsContours) {
  cv::Mat prob = cv::Mat::zeros(40, 120, CV_32FC1);
  for (int i = 0; i < 3; ++i) prob(cv::Rect(5 + 40 * i, 10, 30, 10)).setTo(1.0f);
  EXPECT_EQ(boxes_from_prob_map(prob, 1.0, 120, 40).size(), 3u);
  PostprocessOptions options;
  options.max_candidates = 2;
  EXPECT_EQ(boxes_from_prob_map(prob, 1.0, 120, 40, options).size(), 2u);
  options.max_candidates = 0;
  EXPECT_TRUE(boxes_from_prob_map(prob, 1.0, 120, 40, options).empty());
}

TEST(PostprocessTest, NanProbabilitiesNeverYieldNan) {
  cv::Mat prob = filled_rect(40, 80, cv::Rect(10, 10, 50, 10), 1.0f);
  prob.at<float>(15, 30) = std::numeric_limits<float>::quiet_NaN();
  prob.at<float>(0, 0) = std::numeric_limits<float>::quiet_NaN();
  const std::vector<Detection> dets = boxes_from_prob_map(prob, 1.0, 80, 40);
  for (const Detection& d : dets) {
    EXPECT_FALSE(std::isnan(d.score));
    for (const Point& p : d.polygon) {
      EXPECT_TRUE(std::isfinite(p.x) && std::isfinite(p.y));
    }
  }
}

TEST(PostprocessTest, RejectsBadArguments) {
  const cv::Mat prob = cv::Mat::zeros(8, 8, CV_32FC1);
  EXPECT_THROW(boxes_from_prob_map(cv::Mat::zeros(8, 8, CV_8UC1), 1.0, 8, 8),
               std::invalid_argument);
  EXPECT_THROW(boxes_from_prob_map(prob, 0.0, 8, 8), std::invalid_argument);
  EXPECT_THROW(
      boxes_from_prob_map(prob, std::numeric_limits<double>::quiet_NaN(), 8, 8),
      std::invalid_argument);
  EXPECT_THROW(boxes_from_prob_map(prob, 1.0, -1, 8), std::invalid_argument);
  PostprocessOptions options;
  options.max_candidates = -1;
  EXPECT_THROW(boxes_from_prob_map(prob, 1.0, 8, 8, options),
               std::invalid_argument);
}

}  // namespace
}  // namespace dbh::model
