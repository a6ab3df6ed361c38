// Properties of evaluation (spec §7.2, §8.1): the ICDAR 2015 protocol scores
// perfect predictions 1 and penalises a false detection in precision only;
// post-processing recovers the boxes whose shrunk kernels were drawn.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <opencv2/imgproc.hpp>
#include <random>
#include <string>
#include <vector>

#include "model/eval/icdar_eval.h"
#include "model/eval/postprocess.h"
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

// Uniform in [lo, hi] with 1e-6 resolution (shrinks towards lo).
rc::Gen<double> gen_real(double lo, double hi) {
  return rc::gen::map(uniform(0, 1000001), [lo, hi](int v) {
    return lo + (hi - lo) * (static_cast<double>(v) / 1e6);
  });
}

// A simple star-shaped polygon around (cx, cy) within max_radius of it:
// 3..12 vertices at sorted angles with every gap below π, radii in
// [0.3, 1]·max_radius; either orientation.
rc::Gen<Polygon> gen_star(double cx, double cy, double max_radius) {
  return rc::gen::exec([=] {
    const int n = *uniform(3, 13);
    const double step = 2 * kPi / n;
    const double phase = *gen_real(0, 2 * kPi);
    Polygon poly;
    for (int i = 0; i < n; ++i) {
      const double angle = phase + (i + *gen_real(0, 0.39)) * step;
      const double r = max_radius * *gen_real(0.3, 1.0);
      poly.push_back({cx + r * std::cos(angle), cy + r * std::sin(angle)});
    }
    if (*rc::gen::arbitrary<bool>()) std::reverse(poly.begin(), poly.end());
    return poly;
  });
}

// A rectangle rotated about (cx, cy) that fits in a circle of max_radius.
rc::Gen<Polygon> gen_rotated_rect(double cx, double cy, double max_radius) {
  return rc::gen::exec([=] {
    const double half_diag = max_radius * *gen_real(0.3, 1.0);
    const double t = *gen_real(0.1, kPi / 2 - 0.1);  // aspect angle
    const double hw = half_diag * std::cos(t), hh = half_diag * std::sin(t);
    const double a = *gen_real(0, kPi);
    const double c = std::cos(a), s = std::sin(a);
    Polygon poly;
    for (const auto& [x, y] : {std::pair{-hw, -hh}, std::pair{hw, -hh},
                               std::pair{hw, hh}, std::pair{-hw, hh}}) {
      poly.push_back({cx + c * x - s * y, cy + s * x + c * y});
    }
    return poly;
  });
}

struct EvalImage {
  std::vector<Polygon> gt;
  std::vector<bool> gt_ignore;  // std::vector<bool>: the match_image API
};

void show_polygon(const Polygon& p, std::ostream& os) {
  os << "[";
  for (const Point& q : p) os << "(" << q.x << ", " << q.y << ")";
  os << "]";
}

void showValue(const EvalImage& im, std::ostream& os) {
  for (size_t i = 0; i < im.gt.size(); ++i) {
    os << "\n  ";
    show_polygon(im.gt[i], os);
    if (im.gt_ignore[i]) os << " ###";
  }
}

// 1..12 ground truths in the cells of a grid (so none overlap), star or
// rotated-rectangle shaped; the first is care, the others are "###" with
// probability 1/5.
rc::Gen<EvalImage> gen_eval_image() {
  return rc::gen::exec([] {
    const int cols = *uniform(1, 5);
    const int rows = *uniform(1, 4);
    const double cell = *gen_real(24, 160);
    EvalImage im;
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) {
        const bool first = im.gt.empty();
        if (!first && *uniform(0, 4) == 0) continue;  // empty cell
        const double cx = (c + 0.5) * cell, cy = (r + 0.5) * cell;
        const double radius = cell / 2 - 2;
        im.gt.push_back(*rc::gen::arbitrary<bool>() ? *gen_star(cx, cy, radius)
                                                   : *gen_rotated_rect(cx, cy, radius));
        im.gt_ignore.push_back(!first && *uniform(0, 5) == 0);
      }
    }
    return im;
  });
}

// The detections in a random order.
std::vector<Polygon> shuffled(const std::vector<Polygon>& polys) {
  std::vector<Polygon> out = polys;
  std::mt19937 rng(*rc::gen::arbitrary<uint32_t>());
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

RC_GTEST_PROP(EvalProp, PerfectPredictionsScoreOne, ()) {
  const auto images = *rc::gen::container<std::vector<EvalImage>>(
      *uniform(1, 4), gen_eval_image());
  std::vector<EvalCounts> counts;
  for (const EvalImage& im : images) {
    for (const Polygon& g : im.gt) RC_ASSERT(is_valid_polygon(g));
    counts.push_back(match_image(im.gt, im.gt_ignore, shuffled(im.gt)));
  }
  const EvalResult r = summarize(counts);
  RC_ASSERT(r.counts.gt > 0);
  RC_ASSERT(r.precision == 1.0);
  RC_ASSERT(r.recall == 1.0);
  RC_ASSERT(r.hmean == 1.0);
}

RC_GTEST_PROP(EvalProp, OneFarFalseDetectionLowersPrecisionOnly, ()) {
  const auto images = *rc::gen::container<std::vector<EvalImage>>(
      *uniform(1, 4), gen_eval_image());
  const auto victim = static_cast<size_t>(
      *uniform<int>(0, static_cast<int>(images.size())));
  // Beyond every grid (≤ 4 cells of ≤ 160 px), still a valid coordinate.
  const double x = *gen_real(2000, 100000), y = *gen_real(2000, 100000);
  const Polygon far = *gen_rotated_rect(x, y, *gen_real(4, 200));
  std::vector<EvalCounts> counts;
  int64_t care = 0;
  for (size_t i = 0; i < images.size(); ++i) {
    const EvalImage& im = images[i];
    std::vector<Polygon> det = im.gt;
    if (i == victim) det.push_back(far);
    counts.push_back(match_image(im.gt, im.gt_ignore, shuffled(det)));
    care += std::count(im.gt_ignore.begin(), im.gt_ignore.end(), false);
  }
  const EvalResult r = summarize(counts);
  RC_ASSERT(r.counts.gt == care);
  RC_ASSERT(r.counts.matched == care);
  RC_ASSERT(r.counts.det == care + 1);
  RC_ASSERT(r.recall == 1.0);
  RC_ASSERT(r.precision < 1.0);
  RC_ASSERT(std::abs(r.precision - static_cast<double>(care) / (care + 1)) < 1e-12);
  RC_ASSERT(r.hmean < 1.0);
}

struct Box {
  int x = 0, y = 0, w = 0, h = 0;
  Polygon polygon() const {
    return {{double(x), double(y)}, {double(x + w), double(y)},
            {double(x + w), double(y + h)}, {double(x), double(y + h)}};
  }
};

struct RoundTrip {
  int width = 0;
  int height = 0;
  std::vector<Box> boxes;
};

void showValue(const RoundTrip& t, std::ostream& os) {
  os << t.width << "x" << t.height << ":";
  for (const Box& b : t.boxes) {
    os << " {x " << b.x << ", y " << b.y << ", w " << b.w << ", h " << b.h << "}";
  }
}

bool separated(const Box& a, const Box& b, int gap) {
  return a.x + a.w + gap <= b.x || b.x + b.w + gap <= a.x ||
         a.y + a.h + gap <= b.y || b.y + b.h + gap <= a.y;
}

// Longest side over shortest side of the round-trip boxes. The property needs
// a bound: unclip ratio 1.5 only inverts the r = 0.4 shrink for squarish
// boxes. For a w×h box with w ≫ h, D → 0.42h leaves a kernel 0.16h high, the
// unclip adds 2·0.75·0.16h, and the box comes back 0.4h high: IoU → 0.4
// (see PostprocessUnderRecoversElongatedBoxes).
constexpr int kMaxAspect = 4;

// 1..12 axis-aligned boxes of at least 40×16 px (either orientation, aspect
// ratio ≤ kMaxAspect), pairwise ≥ 20 px apart, inside an image of
// 100..512 × 60..512 px.
rc::Gen<RoundTrip> gen_round_trip() {
  return rc::gen::exec([] {
    RoundTrip t;
    t.width = *uniform(100, 513);
    t.height = *uniform(60, 513);
    const int attempts = *uniform(1, 13);
    for (int i = 0; i < attempts; ++i) {
      const bool tall = *rc::gen::arbitrary<bool>();
      const int along = tall ? t.height : t.width;
      const int across = tall ? t.width : t.height;
      const int short_side = *uniform(16, std::min(96, across - 2) + 1);
      const int long_lo = std::max(40, short_side);
      const int long_hi = std::min({kMaxAspect * short_side, along - 2, 240});
      if (long_hi < long_lo) continue;
      const int long_side = *uniform(long_lo, long_hi + 1);
      Box b;
      b.w = tall ? short_side : long_side;
      b.h = tall ? long_side : short_side;
      b.x = *uniform(1, t.width - b.w);
      b.y = *uniform(1, t.height - b.h);
      if (std::all_of(t.boxes.begin(), t.boxes.end(),
                      [&](const Box& o) { return separated(b, o, 20); })) {
        t.boxes.push_back(b);
      }
    }
    return t;
  });
}

// The probability map a perfect model would predict: 1 on each box's shrunk
// kernel G_s (D = A(1 − r²)/L, r = 0.4, offset_polygon, vertices rounded as
// make_label_maps draws them), 0 elsewhere.
cv::Mat kernel_map(const RoundTrip& t) {
  cv::Mat prob = cv::Mat::zeros(t.height, t.width, CV_32FC1);
  for (const Box& b : t.boxes) {
    const Polygon poly = b.polygon();
    const std::vector<Polygon> kernel = offset_polygon(poly, -shrink_distance(poly, 0.4));
    if (kernel.empty()) continue;
    std::vector<cv::Point> pts;
    for (const Point& p : kernel[0]) {
      pts.emplace_back(static_cast<int>(std::lround(p.x)), static_cast<int>(std::lround(p.y)));
    }
    cv::fillPoly(prob, std::vector<std::vector<cv::Point>>{pts}, cv::Scalar(1));
  }
  return prob;
}

RC_GTEST_PROP(EvalProp, PostprocessRecoversBoxesFromTheirShrunkKernels, ()) {
  const RoundTrip t = *gen_round_trip();
  RC_PRE(!t.boxes.empty());
  const cv::Mat prob = kernel_map(t);
  PostprocessOptions options;
  options.unclip_ratio = 1.5;
  const std::vector<Detection> dets =
      boxes_from_prob_map(prob, 1.0, t.width, t.height, options);
  RC_ASSERT(dets.size() == t.boxes.size());
  std::vector<bool> used(t.boxes.size(), false);
  double worst = 1.0;
  for (const Detection& d : dets) {
    size_t best = 0;
    double best_iou = -1;
    for (size_t i = 0; i < t.boxes.size(); ++i) {
      const double iou = polygon_iou(d.polygon, t.boxes[i].polygon());
      if (iou > best_iou) {
        best_iou = iou;
        best = i;
      }
    }
    RC_ASSERT(best_iou > 0.5);
    RC_ASSERT(!used[best]);
    used[best] = true;
    worst = std::min(worst, best_iou);
  }
  RC_CLASSIFY(worst > 0.8, "every IoU > 0.8");
}

// Not a bug in boxes_from_prob_map: DB's r = 0.4 shrink and 1.5 unclip do
// not invert each other for long thin boxes (found by the property above
// before kMaxAspect bounded it; shrunk counterexample 174×17 at (1, 1)).
TEST(EvalTest, PostprocessUnderRecoversElongatedBoxes) {
  RoundTrip t;
  t.width = 193;
  t.height = 126;
  t.boxes = {Box{1, 1, 174, 17}};
  const std::vector<Detection> dets =
      boxes_from_prob_map(kernel_map(t), 1.0, t.width, t.height);
  ASSERT_EQ(dets.size(), 1u);
  const double iou = polygon_iou(dets[0].polygon, t.boxes[0].polygon());
  EXPECT_GT(iou, 0.35);
  EXPECT_LT(iou, 0.5);
}

}  // namespace
}  // namespace dbh::model
