#include "model/label/label_maps.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <opencv2/imgproc.hpp>
#include <random>
#include <stdexcept>
#include <string>

#include "model/label/shrink.h"

namespace dbh::model {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// The Appendix B rectangle (100×20, D = 7) placed at (10, 10).
const Polygon kRect{{10, 10}, {110, 10}, {110, 30}, {10, 30}};
constexpr int kH = 60;
constexpr int kW = 140;

float at(const cv::Mat& m, int x, int y) { return m.at<float>(y, x); }

// Extent (max − min) of the non-zero pixels of a map, as width × height.
cv::Size2d extent(const cv::Mat& m) {
  cv::Mat nz;
  cv::findNonZero(m != 0, nz);
  if (nz.empty()) return {-1, -1};
  const cv::Rect r = cv::boundingRect(nz);
  return {r.width - 1.0, r.height - 1.0};
}

bool is_binary(const cv::Mat& m) {
  return m.empty() || cv::countNonZero((m != 0) & (m != 1)) == 0;
}

// Every invariant the loss relies on (spec §4.4, §11 item 3).
void expect_valid(const LabelMaps& maps, int h, int w,
                  const LabelMapOptions& o = {}) {
  for (const cv::Mat* m : {&maps.gt_shrink, &maps.gt_shrink_mask,
                           &maps.gt_thresh, &maps.gt_thresh_mask}) {
    ASSERT_EQ(m->type(), CV_32FC1);
    ASSERT_EQ(m->rows, h);
    ASSERT_EQ(m->cols, w);
    EXPECT_TRUE(cv::checkRange(*m)) << "NaN or Inf in a label map";
  }
  EXPECT_TRUE(is_binary(maps.gt_shrink));
  EXPECT_TRUE(is_binary(maps.gt_shrink_mask));
  EXPECT_TRUE(is_binary(maps.gt_thresh_mask));
  double lo = 0, hi = 0;
  cv::minMaxLoc(maps.gt_thresh, &lo, &hi);
  if (h > 0 && w > 0) {
    EXPECT_GE(lo, static_cast<float>(o.thresh_min));
    EXPECT_LE(hi, static_cast<float>(o.thresh_max));
  }
}

TEST(LabelMapsTest, AppendixBRectangle) {
  const LabelMaps maps = make_label_maps({{kRect, false}}, kH, kW);
  expect_valid(maps, kH, kW);
  // G_s ≈ 86×6 and G_d ≈ 114×34, within a pixel.
  const cv::Size2d s = extent(maps.gt_shrink);
  EXPECT_NEAR(s.width, 86, 1);
  EXPECT_NEAR(s.height, 6, 1);
  const cv::Size2d d = extent(maps.gt_thresh_mask);
  EXPECT_NEAR(d.width, 114, 1);
  EXPECT_NEAR(d.height, 34, 1);
  EXPECT_EQ(cv::countNonZero(maps.gt_shrink_mask), kH * kW);
}

TEST(LabelMapsTest, ThresholdIsMaxOnEdgesAndMinFarAway) {
  const LabelMaps maps = make_label_maps({{kRect, false}}, kH, kW);
  const cv::Mat& t = maps.gt_thresh;
  for (const cv::Point& p :
       {cv::Point(10, 20), cv::Point(60, 10), cv::Point(110, 20),
        cv::Point(60, 30), cv::Point(10, 10), cv::Point(110, 30)}) {
    EXPECT_FLOAT_EQ(at(t, p.x, p.y), 0.7f) << p;
  }
  // Centre (10 px from the long edges) and far outside: ≥ D away.
  EXPECT_FLOAT_EQ(at(t, 60, 20), 0.3f);
  EXPECT_FLOAT_EQ(at(t, 130, 55), 0.3f);
  EXPECT_FLOAT_EQ(at(t, 0, 0), 0.3f);
  // Linear in between: 4 px inside → 0.3 + 0.4·(1 − 4/7); 3 px outside too.
  EXPECT_NEAR(at(t, 60, 14), 0.3 + 0.4 * (1 - 4.0 / 7), 1e-6);
  EXPECT_NEAR(at(t, 60, 7), 0.3 + 0.4 * (1 - 3.0 / 7), 1e-6);
}

TEST(LabelMapsTest, ThresholdMaskCoversTheDilatedPolygon) {
  const LabelMaps maps = make_label_maps({{kRect, false}}, kH, kW);
  const double d = shrink_distance(kRect, 0.4);
  int inside_missed = 0, outside_set = 0;
  for (int y = 0; y < kH; ++y) {
    for (int x = 0; x < kW; ++x) {
      const bool in_rect = x >= 10 && x <= 110 && y >= 10 && y <= 30;
      double dist = 0;
      if (!in_rect) {
        const double dx = std::max({10.0 - x, 0.0, x - 110.0});
        const double dy = std::max({10.0 - y, 0.0, y - 30.0});
        dist = std::hypot(dx, dy);
      }
      const float m = at(maps.gt_thresh_mask, x, y);
      if (dist <= d - 1 && m != 1) ++inside_missed;
      if (dist >= d + 1 && m != 0) ++outside_set;
    }
  }
  EXPECT_EQ(inside_missed, 0);
  EXPECT_EQ(outside_set, 0);
}

TEST(LabelMapsTest, IgnoredTextIsMaskedAndUnsupervised) {
  const LabelMaps maps = make_label_maps({{kRect, true}}, kH, kW);
  expect_valid(maps, kH, kW);
  EXPECT_EQ(cv::countNonZero(maps.gt_shrink), 0);
  EXPECT_EQ(cv::countNonZero(maps.gt_thresh_mask), 0);
  EXPECT_EQ(at(maps.gt_shrink_mask, 60, 20), 0.0f);
  EXPECT_EQ(at(maps.gt_shrink_mask, 10, 10), 0.0f);
  EXPECT_EQ(at(maps.gt_shrink_mask, 110, 30), 0.0f);
  EXPECT_EQ(at(maps.gt_shrink_mask, 111, 20), 1.0f);
  EXPECT_EQ(cv::countNonZero(maps.gt_shrink_mask == 0), 101 * 21);
  EXPECT_FLOAT_EQ(at(maps.gt_thresh, 10, 20), 0.3f);
}

TEST(LabelMapsTest, TinyTextIsIgnoredInTheMask) {
  const Polygon tiny{{20, 20}, {26, 20}, {26, 40}, {20, 40}};  // 6 px wide.
  const LabelMaps maps = make_label_maps({{tiny, false}}, kH, kW);
  expect_valid(maps, kH, kW);
  EXPECT_EQ(cv::countNonZero(maps.gt_shrink), 0);
  EXPECT_EQ(cv::countNonZero(maps.gt_thresh_mask), 0);
  EXPECT_EQ(at(maps.gt_shrink_mask, 23, 30), 0.0f);
  // Lowering min_text_size keeps it.
  LabelMapOptions o;
  o.min_text_size = 5;
  const LabelMaps kept = make_label_maps({{tiny, false}}, kH, kW, o);
  EXPECT_GT(cv::countNonZero(kept.gt_shrink), 0);
  EXPECT_EQ(cv::countNonZero(kept.gt_shrink_mask), kH * kW);
}

TEST(LabelMapsTest, SplitShrinkKeepsOnlyTheFirstPiece) {
  const Polygon dumbbell{{0, 0},   {40, 0},  {40, 18},  {80, 18},
                         {80, 0},  {120, 0}, {120, 40}, {80, 40},
                         {80, 22}, {40, 22}, {40, 40},  {0, 40}};
  Polygon moved;
  for (const Point& p : dumbbell) moved.push_back({p.x + 5, p.y + 5});
  const LabelMaps maps = make_label_maps({{moved, false}}, kH, kW);
  expect_valid(maps, kH, kW);
  cv::Mat labels;
  cv::Mat gt8;
  maps.gt_shrink.convertTo(gt8, CV_8U);
  EXPECT_EQ(cv::connectedComponents(gt8, labels), 2);  // Background + one.
  EXPECT_EQ(cv::countNonZero(maps.gt_shrink_mask), kH * kW);
}

TEST(LabelMapsTest, InstancesMergeByMaximum) {
  const Polygon a{{10, 10}, {70, 10}, {70, 30}, {10, 30}};
  const Polygon b{{50, 15}, {120, 15}, {120, 45}, {50, 45}};
  const LabelMaps both = make_label_maps({{a, false}, {b, false}}, kH, kW);
  const LabelMaps only_a = make_label_maps({{a, false}}, kH, kW);
  const LabelMaps only_b = make_label_maps({{b, false}}, kH, kW);
  cv::Mat expected = cv::max(only_a.gt_thresh, only_b.gt_thresh);
  EXPECT_EQ(cv::countNonZero(both.gt_thresh != expected), 0);
  expected = cv::max(only_a.gt_shrink, only_b.gt_shrink);
  EXPECT_EQ(cv::countNonZero(both.gt_shrink != expected), 0);
}

TEST(LabelMapsTest, DegenerateInputsGiveFiniteMapsInRange) {
  const std::vector<Polygon> polys = {
      {},
      {{5, 5}},
      {{5, 5}, {50, 40}},            // 2 points.
      {{0, 0}, {20, 20}, {40, 40}},  // Zero area.
      {{10, 10}, {10, 10}, {60, 10}, {60, 10}, {60, 40}, {10, 40}, {10, 10}},
      {{-100, -50}, {-10, -50}, {-10, -5}, {-100, -5}},  // Fully outside.
      {{-50, 10}, {50, 10}, {50, 30}, {-50, 30}},        // Partly outside.
      {{100, 40}, {400, 40}, {400, 90}, {100, 90}},      // Partly outside.
      {{10, 10}, {kNan, 10}, {60, 40}, {10, 40}},
      {{10, 10}, {kInf, 10}, {kInf, 40}, {10, 40}},
      {{-kInf, -kInf}, {kInf, -kInf}, {kInf, kInf}, {-kInf, kInf}},
      {{10, 10}, {60, 40}, {60, 10}, {10, 40}},  // Bow tie.
      {{10, 10}, {130, 10.5}, {10, 11}},         // Sliver.
  };
  for (size_t i = 0; i < polys.size(); ++i) {
    SCOPED_TRACE("polygon " + std::to_string(i));
    for (bool ignore : {false, true}) {
      expect_valid(make_label_maps({{polys[i], ignore}}, kH, kW), kH, kW);
    }
  }
  // All at once, too.
  std::vector<TextInstance> all;
  for (const Polygon& p : polys) all.push_back({p, false});
  expect_valid(make_label_maps(all, kH, kW), kH, kW);
}

TEST(LabelMapsTest, DuplicateVerticesGiveTheSameMapsAsWithout) {
  const Polygon dup{{10, 10},  {10, 10}, {110, 10}, {110, 30},
                    {110, 30}, {10, 30}, {10, 10}};
  const LabelMaps a = make_label_maps({{dup, false}}, kH, kW);
  const LabelMaps b = make_label_maps({{kRect, false}}, kH, kW);
  expect_valid(a, kH, kW);
  EXPECT_EQ(cv::countNonZero(a.gt_thresh != b.gt_thresh), 0);
  EXPECT_EQ(cv::countNonZero(a.gt_shrink != b.gt_shrink), 0);
}

TEST(LabelMapsTest, PartlyOutsideTextIsClippedToTheImage) {
  const Polygon poly{{-50, 10}, {60, 10}, {60, 30}, {-50, 30}};
  const LabelMaps maps = make_label_maps({{poly, false}}, kH, kW);
  expect_valid(maps, kH, kW);
  EXPECT_GT(cv::countNonZero(maps.gt_shrink), 0);
  // [DB] clips vertices first, so x = 0 becomes an edge of the text.
  EXPECT_FLOAT_EQ(at(maps.gt_thresh, 0, 20), 0.7f);
  EXPECT_EQ(at(maps.gt_thresh_mask, 0, 20), 1.0f);
}

TEST(LabelMapsTest, EmptyImageAndNoTexts) {
  expect_valid(make_label_maps({{kRect, false}}, 0, 0), 0, 0);
  const LabelMaps maps = make_label_maps({}, 4, 3);
  expect_valid(maps, 4, 3);
  EXPECT_EQ(cv::countNonZero(maps.gt_shrink_mask), 12);
  EXPECT_EQ(cv::countNonZero(maps.gt_thresh != 0.3f), 0);
}

TEST(LabelMapsTest, RejectsBadOptions) {
  LabelMapOptions o;
  o.shrink_ratio = kNan;
  EXPECT_THROW(make_label_maps({}, 4, 4, o), std::invalid_argument);
  o = {};
  o.thresh_min = 0.8;
  EXPECT_THROW(make_label_maps({}, 4, 4, o), std::invalid_argument);
  o = {};
  o.min_text_size = kInf;
  EXPECT_THROW(make_label_maps({}, 4, 4, o), std::invalid_argument);
  EXPECT_THROW(make_label_maps({}, -1, 4), std::invalid_argument);
}

TEST(PointSegmentDistanceTest, ExactAndGuarded) {
  EXPECT_DOUBLE_EQ(point_segment_distance({5, 3}, {0, 0}, {10, 0}), 3.0);
  EXPECT_DOUBLE_EQ(point_segment_distance({13, 4}, {0, 0}, {10, 0}), 5.0);
  EXPECT_DOUBLE_EQ(point_segment_distance({3, 4}, {0, 0}, {0, 0}), 5.0);
  EXPECT_DOUBLE_EQ(point_segment_distance({0, 0}, {0, 0}, {0, 0}), 0.0);
  EXPECT_DOUBLE_EQ(point_segment_distance({10, 0}, {0, 0}, {10, 0}), 0.0);
}

// Randomized checks with fixed seeds (the rapidcheck properties live in
// tests/property). Every map must stay finite and in range.
Polygon random_polygon(std::mt19937& rng, double lo, double hi, int max_n) {
  std::uniform_int_distribution<int> count(0, max_n);
  std::uniform_real_distribution<double> coord(lo, hi);
  std::uniform_int_distribution<int> coin(0, 9);
  Polygon poly;
  const int n = count(rng);
  for (int i = 0; i < n; ++i) {
    if (!poly.empty() && coin(rng) == 0) {
      poly.push_back(poly.back());  // Repeated vertex.
    } else if (coin(rng) == 0) {
      poly.push_back({std::round(coord(rng)), std::round(coord(rng))});
    } else {
      poly.push_back({coord(rng), coord(rng)});
    }
  }
  return poly;
}

TEST(LabelMapsRandomTest, RandomPolygonsGiveValidMaps) {
  std::mt19937 rng(20240611);
  std::bernoulli_distribution ignore(0.2);
  for (int iter = 0; iter < 200; ++iter) {
    SCOPED_TRACE("iteration " + std::to_string(iter));
    std::vector<TextInstance> texts;
    const int n = iter % 4;
    for (int i = 0; i < n; ++i) {
      texts.push_back({random_polygon(rng, -40, 180, 10), ignore(rng)});
    }
    expect_valid(make_label_maps(texts, kH, kW), kH, kW);
  }
}

TEST(LabelMapsRandomTest, RandomStarsAndOptionsGiveValidMaps) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int iter = 0; iter < 100; ++iter) {
    SCOPED_TRACE("iteration " + std::to_string(iter));
    // A star-shaped (often concave) polygon around a random centre.
    const double cx = unit(rng) * kW, cy = unit(rng) * kH;
    const double r = 2 + unit(rng) * 60;
    const int n = 3 + static_cast<int>(unit(rng) * 20);
    Polygon star;
    for (int i = 0; i < n; ++i) {
      const double a = 2 * M_PI * i / n;
      const double ri = r * (0.2 + 0.8 * unit(rng));
      star.push_back({cx + ri * std::cos(a), cy + ri * std::sin(a)});
    }
    LabelMapOptions o;
    o.shrink_ratio = unit(rng);
    o.thresh_min = unit(rng) * 0.5;
    o.thresh_max = o.thresh_min + unit(rng) * 0.5;
    o.min_text_size = unit(rng) * 10;
    expect_valid(make_label_maps({{star, false}}, kH, kW, o), kH, kW, o);
  }
}

TEST(LabelMapsRandomTest, RandomTinyAndThinPolygonsGiveValidMaps) {
  std::mt19937 rng(99);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  LabelMapOptions o;
  o.min_text_size = 0;  // Let degenerate shapes reach the offset code.
  for (int iter = 0; iter < 300; ++iter) {
    SCOPED_TRACE("iteration " + std::to_string(iter));
    const double x = unit(rng) * kW, y = unit(rng) * kH;
    const double len = unit(rng) * 80, thick = unit(rng) * 1.5;
    const double a = unit(rng) * M_PI;
    const double c = std::cos(a), s = std::sin(a);
    const Polygon thin{{x, y},
                       {x + len * c, y + len * s},
                       {x + len * c - thick * s, y + len * s + thick * c},
                       {x - thick * s, y + thick * c}};
    expect_valid(make_label_maps({{thin, false}}, kH, kW, o), kH, kW, o);
  }
}

}  // namespace
}  // namespace dbh::model
