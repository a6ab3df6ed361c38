// Note [Plots that tell the truth]: ticks at round values on both axes, and
// failed trials marked only where they ran.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <opencv2/imgcodecs.hpp>

#include "harness/report/plot.h"
#include "tests/support/files.h"

namespace dbh::harness {
namespace {

namespace fs = std::filesystem;

TEST(PlotTest, NiceTicksAreRoundCoverTheRangeAndAreFew) {
  const auto t = report::nice_ticks(0.0, 2200.0, 6, false);
  ASSERT_GE(t.size(), 3u);
  EXPECT_LE(t.size(), 7u);
  const double step = t[1] - t[0];
  const double mag = std::pow(10.0, std::floor(std::log10(step)));
  const double m = step / mag;
  EXPECT_TRUE(std::abs(m - 1) < 1e-9 || std::abs(m - 2) < 1e-9 || std::abs(m - 5) < 1e-9) << step;
  EXPECT_GE(t.front(), 0.0);
  EXPECT_LE(t.back(), 2200.0);
  // Batch sizes: whole numbers only, never 2.5.
  for (const double x : report::nice_ticks(0.6, 4.4, 10, true)) EXPECT_EQ(x, std::round(x)) << x;
  EXPECT_EQ(report::nice_ticks(0.6, 4.4, 10, true), (std::vector<double>{1, 2, 3, 4}));
}

// Red pixels (BGR) in the top band of the plot area: the failed-trial crosses.
int red_pixels(const cv::Mat& img, int y0, int y1) {
  int n = 0;
  for (int y = y0; y < y1; ++y) {
    for (int x = 90; x < img.cols - 30; ++x) {
      const auto p = img.at<cv::Vec3b>(y, x);
      if (p[2] > 180 && p[0] < 80 && p[1] < 80) ++n;
    }
  }
  return n;
}

TEST(PlotTest, AFailedTrialIsMarkedWhereItRanAndNowhereElse) {
  const testing::ScratchDir dir("dbh-plot");
  report::PlotOptions o;
  o.title = "peak";
  o.x_label = "batch size";
  o.integer_x = true;
  report::PlotSeries s;
  s.name = "fp32";
  s.x = {1, 4};
  s.y = {700, 1500};
  report::write_plot((dir.path() / "clean.png").string(), o, {s});
  s.failed_x = {8};
  report::write_plot((dir.path() / "failed.png").string(), o, {s});
  const cv::Mat clean = cv::imread((dir.path() / "clean.png").string());
  const cv::Mat failed = cv::imread((dir.path() / "failed.png").string());
  ASSERT_FALSE(clean.empty());
  ASSERT_FALSE(failed.empty());
  EXPECT_EQ(red_pixels(clean, 60, 110), 0);
  EXPECT_GT(red_pixels(failed, 60, 110), 10);
  // The cross sits at batch 8, the right end of the x range.
  int rightmost = 0;
  for (int y = 60; y < 110; ++y) {
    for (int x = 0; x < failed.cols; ++x) {
      const auto p = failed.at<cv::Vec3b>(y, x);
      if (p[2] > 180 && p[0] < 80 && p[1] < 80) rightmost = std::max(rightmost, x);
    }
  }
  EXPECT_GT(rightmost, failed.cols * 3 / 4);
}

}  // namespace
}  // namespace dbh::harness
