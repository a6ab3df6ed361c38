#include "model/data/synthetic_render.h"

#include <gtest/gtest.h>

#include <cmath>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/eval/icdar_eval.h"
#include "model/eval/overlay.h"
#include "tests/support/files.h"
#include "model/label/label_maps.h"

namespace dbh::model {
namespace {

constexpr uint64_t kSeed = 20240611;

RenderOptions clean_options() {
  RenderOptions o;
  o.noise_sigma_max = 0;
  o.blur_prob = 0;
  return o;
}

// Σ(x_i·y_{i+1} − x_{i+1}·y_i): positive for clockwise polygons with y down.
double shoelace(const Polygon& p) {
  double s = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const Point& a = p[i];
    const Point& b = p[(i + 1) % p.size()];
    s += a.x * b.y - b.x * a.y;
  }
  return s;
}

// 255 inside any polygon (1/16 px precision) grown by `dilate_px`.
cv::Mat polygon_mask(const std::vector<TextInstance>& texts, cv::Size size, int dilate_px) {
  cv::Mat mask = cv::Mat::zeros(size, CV_8UC1);
  for (const auto& t : texts) {
    std::vector<cv::Point> pts;
    for (const auto& p : t.polygon) {
      pts.emplace_back(static_cast<int>(std::lround(p.x * 16)),
                       static_cast<int>(std::lround(p.y * 16)));
    }
    cv::fillPoly(mask, std::vector<std::vector<cv::Point>>{pts}, cv::Scalar(255), cv::LINE_8,
                 4);
  }
  if (dilate_px > 0) {
    cv::dilate(mask, mask,
               cv::getStructuringElement(cv::MORPH_RECT,
                                         cv::Size(2 * dilate_px + 1, 2 * dilate_px + 1)));
  }
  return mask;
}

// Pixels differing strongly (max channel difference > 48) from the local
// background, estimated by a 21×21 median.
cv::Mat ink_mask(const cv::Mat& bgr) {
  cv::Mat bg;
  cv::medianBlur(bgr, bg, 21);
  cv::Mat diff;
  cv::absdiff(bgr, bg, diff);
  std::vector<cv::Mat> ch;
  cv::split(diff, ch);
  cv::Mat m = cv::max(ch[0], cv::max(ch[1], ch[2]));
  return m > 48;
}

double fraction_inside(const cv::Mat& ink, const cv::Mat& inside, int* ink_count) {
  *ink_count = cv::countNonZero(ink);
  if (*ink_count == 0) return 0;
  cv::Mat both;
  cv::bitwise_and(ink, inside, both);
  return static_cast<double>(cv::countNonZero(both)) / *ink_count;
}

TEST(SyntheticRender, SameSeedAndIndexGiveIdenticalSample) {
  for (int64_t index : {0, 1, 7, 12345}) {
    const AnnotatedImage a = render_synthetic_text(kSeed, index);
    const AnnotatedImage b = render_synthetic_text(kSeed, index);
    ASSERT_EQ(a.image.size(), b.image.size());
    EXPECT_EQ(cv::norm(a.image, b.image, cv::NORM_INF), 0) << "index " << index;
    ASSERT_EQ(a.texts.size(), b.texts.size());
    for (size_t i = 0; i < a.texts.size(); ++i) {
      EXPECT_EQ(a.texts[i].ignore, b.texts[i].ignore);
      ASSERT_EQ(a.texts[i].polygon.size(), b.texts[i].polygon.size());
      for (size_t k = 0; k < a.texts[i].polygon.size(); ++k) {
        EXPECT_EQ(a.texts[i].polygon[k].x, b.texts[i].polygon[k].x);
        EXPECT_EQ(a.texts[i].polygon[k].y, b.texts[i].polygon[k].y);
      }
    }
  }
}

TEST(SyntheticRender, DifferentIndexOrSeedGiveDifferentSamples) {
  const AnnotatedImage a = render_synthetic_text(kSeed, 3);
  const AnnotatedImage b = render_synthetic_text(kSeed, 4);
  const AnnotatedImage c = render_synthetic_text(kSeed + 1, 3);
  EXPECT_GT(cv::norm(a.image, b.image, cv::NORM_L1), 0);
  EXPECT_GT(cv::norm(a.image, c.image, cv::NORM_L1), 0);
}

TEST(SyntheticRender, ImageHasRequestedSizeAndType) {
  RenderOptions o;
  o.width = 320;
  o.height = 200;
  const AnnotatedImage s = render_synthetic_text(kSeed, 0, o);
  EXPECT_EQ(s.image.type(), CV_8UC3);
  EXPECT_EQ(s.image.cols, 320);
  EXPECT_EQ(s.image.rows, 200);
}

TEST(SyntheticRender, PolygonsAreFiniteClockwiseQuadsInsideTheImage) {
  RenderOptions o;
  o.width = 512;
  o.height = 384;
  int total = 0;
  for (int64_t index = 0; index < 20; ++index) {
    const AnnotatedImage s = render_synthetic_text(kSeed, index, o);
    for (const auto& t : s.texts) {
      ++total;
      ASSERT_EQ(t.polygon.size(), 4u);
      for (const auto& p : t.polygon) {
        ASSERT_TRUE(std::isfinite(p.x) && std::isfinite(p.y));
        EXPECT_GE(p.x, 0);
        EXPECT_LE(p.x, o.width - 1);
        EXPECT_GE(p.y, 0);
        EXPECT_LE(p.y, o.height - 1);
      }
      EXPECT_GT(shoelace(t.polygon), 0) << "index " << index;
      EXPECT_TRUE(is_valid_polygon(t.polygon));
    }
  }
  EXPECT_GT(total, 20);
}

TEST(SyntheticRender, FirstEdgeFollowsTheReadingDirectionWithinMaxRotation) {
  RenderOptions o;
  o.max_rotate_deg = 25;
  bool saw_rotated = false, saw_horizontal = false;
  for (int64_t index = 0; index < 10; ++index) {
    for (const auto& t : render_synthetic_text(kSeed, index, o).texts) {
      const Point& tl = t.polygon[0];
      const Point& tr = t.polygon[1];
      const double deg = std::atan2(tr.y - tl.y, tr.x - tl.x) * 180.0 / M_PI;
      EXPECT_LE(std::fabs(deg), 25.0 + 1e-9);  // reading direction: +x, give or take 25°
      if (std::fabs(deg) > 1) saw_rotated = true;
      if (deg == 0) saw_horizontal = true;
    }
  }
  EXPECT_TRUE(saw_rotated);
  EXPECT_TRUE(saw_horizontal);

  o.max_rotate_deg = 0;
  for (const auto& t : render_synthetic_text(kSeed, 0, o).texts) {
    EXPECT_EQ(t.polygon[0].y, t.polygon[1].y);
    EXPECT_EQ(t.polygon[0].x, t.polygon[3].x);
  }
}

TEST(SyntheticRender, InkLiesInsideThePolygons) {
  const RenderOptions o = clean_options();
  for (int64_t index = 0; index < 12; ++index) {
    const AnnotatedImage s = render_synthetic_text(kSeed, index, o);
    const cv::Mat ink = ink_mask(s.image);
    int ink_count = 0;
    const double inside = fraction_inside(ink, polygon_mask(s.texts, s.image.size(), 2),
                                          &ink_count);
    EXPECT_GT(ink_count, 300) << "index " << index;
    EXPECT_GT(inside, 0.95) << "index " << index << ", " << ink_count << " ink px";
    // In fact every glyph pixel is covered (the box includes glyph
    // overhang): a polygon from the getTextSize box alone leaves up to ~1%
    // of the ink outside (script faces, thick strokes).
    EXPECT_GT(inside, 0.999) << "index " << index;

    // Control: another sample's polygons do not explain this ink.
    const AnnotatedImage other = render_synthetic_text(kSeed, index + 1000, o);
    const double unrelated =
        fraction_inside(ink, polygon_mask(other.texts, s.image.size(), 2), &ink_count);
    EXPECT_LT(unrelated, 0.6) << "index " << index;
  }
}

TEST(SyntheticRender, PolygonsAreNotMuchLargerThanTheirInk) {
  // Each polygon of a legible word holds a reasonable share of ink.
  RenderOptions o = clean_options();
  o.ignore_prob = 0;
  for (int64_t index = 0; index < 6; ++index) {
    const AnnotatedImage s = render_synthetic_text(kSeed, index, o);
    const cv::Mat ink = ink_mask(s.image);
    for (const auto& t : s.texts) {
      const cv::Mat inside = polygon_mask({t}, s.image.size(), 0);
      cv::Mat both;
      cv::bitwise_and(ink, inside, both);
      const double share = cv::countNonZero(both) / std::max(1.0, area(t.polygon));
      EXPECT_GT(share, 0.04) << "index " << index;
    }
  }
}

TEST(SyntheticRender, WordCountWithinRange) {
  RenderOptions o;
  o.min_words = 4;
  o.max_words = 9;
  for (int64_t index = 0; index < 20; ++index) {
    const size_t n = render_synthetic_text(kSeed, index, o).texts.size();
    EXPECT_GE(n, 4u) << "index " << index;
    EXPECT_LE(n, 9u) << "index " << index;
  }
  o.min_words = o.max_words = 5;
  EXPECT_EQ(render_synthetic_text(kSeed, 0, o).texts.size(), 5u);
}

TEST(SyntheticRender, CrowdedImageGivesUpButKeepsAtLeastOneWord) {
  RenderOptions o;
  o.width = 96;
  o.height = 64;
  o.min_words = o.max_words = 40;
  o.max_place_tries = 5;
  for (int64_t index = 0; index < 5; ++index) {
    const AnnotatedImage s = render_synthetic_text(kSeed, index, o);
    EXPECT_GE(s.texts.size(), 1u);
    EXPECT_LT(s.texts.size(), 40u);
  }
}

TEST(SyntheticRender, PolygonsDoNotOverlap) {
  RenderOptions o;
  o.min_words = 20;
  o.max_words = 30;
  for (int64_t index = 0; index < 8; ++index) {
    const AnnotatedImage s = render_synthetic_text(kSeed, index, o);
    for (size_t i = 0; i < s.texts.size(); ++i) {
      for (size_t j = i + 1; j < s.texts.size(); ++j) {
        EXPECT_LE(polygon_intersection_area(s.texts[i].polygon, s.texts[j].polygon), 1e-9)
            << "index " << index << " words " << i << ", " << j;
      }
    }
  }
}

TEST(SyntheticRender, IgnoreFlagFollowsIgnoreProb) {
  RenderOptions o;
  o.ignore_prob = 1;
  for (const auto& t : render_synthetic_text(kSeed, 0, o).texts) EXPECT_TRUE(t.ignore);
  o.ignore_prob = 0;
  o.min_font_scale = 1.0;
  for (int64_t index = 0; index < 5; ++index) {
    for (const auto& t : render_synthetic_text(kSeed, index, o).texts) EXPECT_FALSE(t.ignore);
  }
}

TEST(SyntheticRender, LabelMapsAreFiniteWithPositiveText) {
  for (int64_t index = 0; index < 4; ++index) {
    const AnnotatedImage s = render_synthetic_text(kSeed, index);
    const LabelMaps maps = make_label_maps(s.texts, s.image.rows, s.image.cols);
    for (const cv::Mat* m :
         {&maps.gt_shrink, &maps.gt_shrink_mask, &maps.gt_thresh, &maps.gt_thresh_mask}) {
      ASSERT_EQ(m->size(), s.image.size());
      EXPECT_TRUE(cv::checkRange(*m));
    }
    EXPECT_GT(cv::countNonZero(maps.gt_shrink), 100) << "index " << index;
  }
}

TEST(SyntheticRender, RejectsInvalidOptions) {
  auto bad = [](auto edit) {
    RenderOptions o;
    edit(o);
    return o;
  };
  EXPECT_THROW(render_synthetic_text(0, 0, bad([](RenderOptions& o) { o.width = 0; })),
               std::invalid_argument);
  EXPECT_THROW(render_synthetic_text(0, 0, bad([](RenderOptions& o) {
                 o.min_words = 5;
                 o.max_words = 4;
               })),
               std::invalid_argument);
  EXPECT_THROW(render_synthetic_text(0, 0, bad([](RenderOptions& o) { o.min_font_scale = 0; })),
               std::invalid_argument);
  EXPECT_THROW(render_synthetic_text(0, 0, bad([](RenderOptions& o) { o.max_font_scale = NAN; })),
               std::invalid_argument);
  EXPECT_THROW(render_synthetic_text(0, 0, bad([](RenderOptions& o) { o.blur_prob = 1.5; })),
               std::invalid_argument);
  EXPECT_THROW(render_synthetic_text(0, 0, bad([](RenderOptions& o) { o.noise_sigma_max = -1; })),
               std::invalid_argument);
  EXPECT_THROW(render_synthetic_text(0, 0, bad([](RenderOptions& o) { o.max_place_tries = 0; })),
               std::invalid_argument);
}

TEST(SyntheticRender, WritesExampleOverlay) {
  const AnnotatedImage s = render_synthetic_text(kSeed, 0);
  std::vector<Polygon> gt;
  std::vector<bool> ignore;
  for (const auto& t : s.texts) {
    gt.push_back(t.polygon);
    ignore.push_back(t.ignore);
  }
  const cv::Mat overlay = draw_overlay(s.image, gt, ignore, {});
  ASSERT_FALSE(overlay.empty());
  EXPECT_GT(cv::norm(overlay, s.image, cv::NORM_L1), 0);
  const dbh::testing::ScratchDir dir("dbh-synthetic-render");
  const std::string path = (dir / "synthetic_render_example.png").string();
  EXPECT_TRUE(cv::imwrite(path, overlay)) << path;
}

}  // namespace
}  // namespace dbh::model
