#include "model/eval/overlay.h"

#include <gtest/gtest.h>

#include <limits>
#include <opencv2/imgproc.hpp>
#include <stdexcept>

namespace dbh::model {
namespace {

// The training normalisation: BGR 8-bit → RGB [0, 1] → (x − mean) / std.
cv::Mat normalise(const cv::Mat& bgr8) {
  cv::Mat rgb;
  cv::cvtColor(bgr8, rgb, cv::COLOR_BGR2RGB);
  cv::Mat f;
  rgb.convertTo(f, CV_32FC3, 1.0 / 255.0);
  cv::subtract(f, cv::Scalar(kImageNetMean[0], kImageNetMean[1], kImageNetMean[2]),
               f);
  cv::divide(f, cv::Scalar(kImageNetStd[0], kImageNetStd[1], kImageNetStd[2]), f);
  return f;
}

// Every 8-bit value in every channel, in a deterministic pattern.
cv::Mat test_image() {
  cv::Mat img(16, 64, CV_8UC3);
  for (int y = 0; y < img.rows; ++y) {
    for (int x = 0; x < img.cols; ++x) {
      const int i = y * img.cols + x;
      img.at<cv::Vec3b>(y, x) = cv::Vec3b(static_cast<uchar>(i % 256),
                                          static_cast<uchar>((i * 7 + 3) % 256),
                                          static_cast<uchar>((255 - i) % 256));
    }
  }
  return img;
}

int max_abs_diff(const cv::Mat& a, const cv::Mat& b) {
  double m = 0;
  cv::Mat diff;
  cv::absdiff(a, b, diff);
  cv::minMaxLoc(diff.reshape(1), nullptr, &m);
  return static_cast<int>(m);
}

TEST(OverlayTest, DenormalizeUndoesNormalise) {
  const cv::Mat img = test_image();
  const cv::Mat back = denormalize_to_bgr8(normalise(img));
  ASSERT_EQ(back.type(), CV_8UC3);
  ASSERT_EQ(back.size(), img.size());
  EXPECT_LE(max_abs_diff(back, img), 1);
  // Channel order matters: a pure blue BGR pixel stays blue.
  const cv::Mat blue(2, 2, CV_8UC3, cv::Scalar(255, 0, 0));
  const cv::Vec3b px = denormalize_to_bgr8(normalise(blue)).at<cv::Vec3b>(0, 0);
  EXPECT_GE(px[0], 254);
  EXPECT_LE(px[2], 1);
}

TEST(OverlayTest, DenormalizeRejectsOtherTypes) {
  EXPECT_TRUE(denormalize_to_bgr8(cv::Mat()).empty());
  EXPECT_THROW(denormalize_to_bgr8(cv::Mat::zeros(4, 4, CV_8UC3)),
               std::invalid_argument);
}

TEST(OverlayTest, LooksAllBlack) {
  EXPECT_TRUE(looks_all_black(cv::Mat::zeros(32, 32, CV_8UC3)));
  EXPECT_TRUE(looks_all_black(cv::Mat(32, 32, CV_8UC3, cv::Scalar(1, 1, 1))));
  EXPECT_FALSE(looks_all_black(test_image()));
  // The seeds' symptom: writing the normalised tensor without undoing the
  // normalisation turns a mid-gray image black.
  cv::Mat naive;
  normalise(cv::Mat(32, 32, CV_8UC3, cv::Scalar(128, 128, 128)))
      .convertTo(naive, CV_8UC3);
  EXPECT_TRUE(looks_all_black(naive));
  EXPECT_THROW(looks_all_black(cv::Mat::zeros(4, 4, CV_32FC1)),
               std::invalid_argument);
}

TEST(OverlayTest, OverlayDrawsColouredOutlinesOnACopy) {
  const cv::Mat black = cv::Mat::zeros(60, 100, CV_8UC3);
  const std::vector<Polygon> gt{{{10, 10}, {40, 10}, {40, 20}, {10, 20}},
                                {{10, 40}, {40, 40}, {40, 50}, {10, 50}}};
  const std::vector<Polygon> det{{{60, 10}, {90, 10}, {90, 20}, {60, 20}}};
  const cv::Mat out = draw_overlay(black, gt, {false, true}, det);
  ASSERT_EQ(out.type(), CV_8UC3);
  EXPECT_EQ(cv::countNonZero(black.reshape(1)), 0);  // Input untouched.
  EXPECT_FALSE(looks_all_black(out));
  const cv::Vec3b green = out.at<cv::Vec3b>(10, 25);
  EXPECT_EQ(green, cv::Vec3b(0, 255, 0));
  const cv::Vec3b gray = out.at<cv::Vec3b>(40, 25);
  EXPECT_EQ(gray, cv::Vec3b(128, 128, 128));
  const cv::Vec3b red = out.at<cv::Vec3b>(10, 75);
  EXPECT_EQ(red, cv::Vec3b(0, 0, 255));
  EXPECT_EQ(out.at<cv::Vec3b>(30, 50), cv::Vec3b(0, 0, 0));
}

TEST(OverlayTest, OverlaySkipsBadPolygonsAndChecksArguments) {
  const cv::Mat gray = cv::Mat::zeros(20, 20, CV_8UC1);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const cv::Mat out =
      draw_overlay(gray, {{{nan, 0}, {5, 5}, {0, 5}}}, {}, {{{1, 1}}});
  ASSERT_EQ(out.type(), CV_8UC3);
  EXPECT_TRUE(looks_all_black(out));
  EXPECT_THROW(draw_overlay(gray, {{{0, 0}, {5, 0}, {5, 5}}}, {true, false}, {}),
               std::invalid_argument);
  EXPECT_THROW(draw_overlay(cv::Mat::zeros(4, 4, CV_32FC3), {}, {}, {}),
               std::invalid_argument);
}

}  // namespace
}  // namespace dbh::model
