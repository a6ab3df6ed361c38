#include "model/data/augment.h"

#include <algorithm>
#include <cmath>

#include <opencv2/imgproc.hpp>

namespace dbh::model {

namespace {
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
}  // namespace

SampleRng::SampleRng(uint64_t seed, int64_t epoch, int64_t index)
    : state_(mix(mix(mix(seed + 0x9E3779B97F4A7C15ULL) ^ static_cast<uint64_t>(epoch)) ^
                 static_cast<uint64_t>(index) * 0xD1B54A32D192ED03ULL)) {}

uint64_t SampleRng::next() {
  state_ += 0x9E3779B97F4A7C15ULL;
  return mix(state_);
}

double SampleRng::uniform(double lo, double hi) {
  const double u = static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0);
  return lo + (hi - lo) * u;
}

int64_t SampleRng::integer(int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
}

namespace {

void transform_points(std::vector<TextInstance>& texts, const cv::Matx23d& m) {
  for (auto& t : texts) {
    for (auto& p : t.polygon) {
      const double x = m(0, 0) * p.x + m(0, 1) * p.y + m(0, 2);
      const double y = m(1, 0) * p.x + m(1, 1) * p.y + m(1, 2);
      p = {x, y};
    }
  }
}

// Picks [lo, hi) along one axis from positions not covered by text.
bool pick_range(const std::vector<uint8_t>& covered, SampleRng& rng, int* lo, int* hi) {
  std::vector<std::pair<int, int>> runs;  // uncovered runs [a, b]
  const int n = static_cast<int>(covered.size());
  for (int i = 0; i < n;) {
    if (covered[static_cast<size_t>(i)]) {
      ++i;
      continue;
    }
    int j = i;
    while (j + 1 < n && !covered[static_cast<size_t>(j + 1)]) ++j;
    runs.emplace_back(i, j);
    i = j + 1;
  }
  if (runs.empty()) return false;
  int a, b;
  if (runs.size() > 1) {
    auto r1 = static_cast<size_t>(rng.integer(0, static_cast<int64_t>(runs.size()) - 1));
    auto r2 = static_cast<size_t>(rng.integer(0, static_cast<int64_t>(runs.size()) - 2));
    if (r2 >= r1) ++r2;
    a = static_cast<int>(rng.integer(runs[r1].first, runs[r1].second));
    b = static_cast<int>(rng.integer(runs[r2].first, runs[r2].second));
  } else {
    a = static_cast<int>(rng.integer(runs[0].first, runs[0].second));
    b = static_cast<int>(rng.integer(runs[0].first, runs[0].second));
  }
  *lo = std::min(a, b);
  *hi = std::max(a, b);
  return true;
}

cv::Rect choose_crop(const AnnotatedImage& in, const AugmentOptions& o, SampleRng& rng) {
  const int w = in.image.cols, h = in.image.rows;
  std::vector<uint8_t> cov_x(static_cast<size_t>(w), 0), cov_y(static_cast<size_t>(h), 0);
  bool any_text = false;
  for (const auto& t : in.texts) {
    if (t.ignore || t.polygon.empty()) continue;
    double x0 = 1e18, x1 = -1e18, y0 = 1e18, y1 = -1e18;
    for (const auto& p : t.polygon) {
      x0 = std::min(x0, p.x), x1 = std::max(x1, p.x);
      y0 = std::min(y0, p.y), y1 = std::max(y1, p.y);
    }
    if (!std::isfinite(x0 + x1 + y0 + y1)) continue;
    const int ax = std::clamp(static_cast<int>(std::floor(x0)), 0, w - 1);
    const int bx = std::clamp(static_cast<int>(std::ceil(x1)), 0, w - 1);
    const int ay = std::clamp(static_cast<int>(std::floor(y0)), 0, h - 1);
    const int by = std::clamp(static_cast<int>(std::ceil(y1)), 0, h - 1);
    if (ax > bx || ay > by) continue;
    std::fill(cov_x.begin() + ax, cov_x.begin() + bx + 1, 1);
    std::fill(cov_y.begin() + ay, cov_y.begin() + by + 1, 1);
    any_text = true;
  }
  const cv::Rect whole(0, 0, w, h);
  if (!any_text) return whole;
  for (int attempt = 0; attempt < o.max_crop_tries; ++attempt) {
    int x0, x1, y0, y1;
    if (!pick_range(cov_x, rng, &x0, &x1) || !pick_range(cov_y, rng, &y0, &y1)) return whole;
    if (x1 - x0 < o.min_crop_side_ratio * w || y1 - y0 < o.min_crop_side_ratio * h) continue;
    // At least one non-ignored polygon must lie inside the crop.
    bool has_text = false;
    for (const auto& t : in.texts) {
      if (t.ignore) continue;
      bool inside = !t.polygon.empty();
      for (const auto& p : t.polygon) {
        inside = inside && p.x >= x0 && p.x <= x1 && p.y >= y0 && p.y <= y1;
      }
      if (inside) {
        has_text = true;
        break;
      }
    }
    if (has_text) return cv::Rect(x0, y0, x1 - x0, y1 - y0);
  }
  return whole;
}

AnnotatedImage crop_and_fit(const AnnotatedImage& in, const cv::Rect& crop, int size,
                            double* scale_out) {
  const double s = std::min(static_cast<double>(size) / crop.width,
                            static_cast<double>(size) / crop.height);
  const int w = std::max(1, std::min(size, static_cast<int>(std::lround(crop.width * s))));
  const int h = std::max(1, std::min(size, static_cast<int>(std::lround(crop.height * s))));
  AnnotatedImage out;
  out.image = cv::Mat::zeros(size, size, CV_8UC3);
  cv::Mat resized;
  cv::resize(in.image(crop), resized, cv::Size(w, h), 0, 0,
             s < 1 ? cv::INTER_AREA : cv::INTER_LINEAR);
  resized.copyTo(out.image(cv::Rect(0, 0, w, h)));
  for (const auto& t : in.texts) {
    TextInstance moved = t;
    bool any_inside = false;
    for (auto& p : moved.polygon) {
      p = {(p.x - crop.x) * s, (p.y - crop.y) * s};
      any_inside = any_inside || (p.x >= 0 && p.x <= w && p.y >= 0 && p.y <= h);
    }
    // Dropped only when completely outside; partly visible text is clipped
    // later by the label generator.
    if (any_inside) out.texts.push_back(std::move(moved));
  }
  if (scale_out) *scale_out = s;
  return out;
}

}  // namespace

AnnotatedImage letterbox(const AnnotatedImage& in, int size, double* scale_out) {
  return crop_and_fit(in, cv::Rect(0, 0, in.image.cols, in.image.rows), size, scale_out);
}

AnnotatedImage augment(const AnnotatedImage& in, const AugmentOptions& o, SampleRng& rng) {
  AnnotatedImage cur{in.image.clone(), in.texts};
  // a. Horizontal flip.
  if (rng.uniform(0, 1) < o.flip_prob) {
    cv::flip(cur.image, cur.image, 1);
    const double w = cur.image.cols;
    for (auto& t : cur.texts) {
      for (auto& p : t.polygon) p.x = w - p.x;
      std::reverse(t.polygon.begin(), t.polygon.end());  // keep clockwise order
    }
  }
  // b. Rotation about the centre, same canvas.
  const double angle = rng.uniform(-o.max_rotate_deg, o.max_rotate_deg);
  if (angle != 0.0) {
    const cv::Point2f centre(static_cast<float>(cur.image.cols) / 2.0f,
                             static_cast<float>(cur.image.rows) / 2.0f);
    const cv::Mat rot = cv::getRotationMatrix2D(centre, angle, 1.0);
    cv::Mat rotated;
    cv::warpAffine(cur.image, rotated, rot, cur.image.size(), cv::INTER_LINEAR,
                   cv::BORDER_CONSTANT, cv::Scalar(0, 0, 0));
    cur.image = rotated;
    transform_points(cur.texts, cv::Matx23d(rot));
  }
  // c. One scale factor for both sides.
  const double scale = rng.uniform(o.min_scale, o.max_scale);
  {
    const int w = std::max(1, static_cast<int>(std::lround(cur.image.cols * scale)));
    const int h = std::max(1, static_cast<int>(std::lround(cur.image.rows * scale)));
    const double sx = static_cast<double>(w) / cur.image.cols;
    const double sy = static_cast<double>(h) / cur.image.rows;
    cv::Mat resized;
    cv::resize(cur.image, resized, cv::Size(w, h), 0, 0, cv::INTER_LINEAR);
    cur.image = resized;
    transform_points(cur.texts, cv::Matx23d(sx, 0, 0, 0, sy, 0));
  }
  // d. Text-preserving crop, fitted into size×size.
  const cv::Rect crop = choose_crop(cur, o, rng);
  return crop_and_fit(cur, crop, o.size, nullptr);
}

}  // namespace dbh::model
