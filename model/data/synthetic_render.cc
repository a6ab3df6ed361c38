#include "model/data/synthetic_render.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include <opencv2/imgproc.hpp>

#include "model/eval/icdar_eval.h"

namespace dbh::model {

namespace {

// Stream tag passed as SampleRng's `epoch`, so that renders never share a
// random stream with the augmentation of the same (seed, index).
constexpr int64_t kStreamTag = 0x53594E5448LL;  // "SYNTH"
// Words keep this distance (px, in word coordinates) from each other.
constexpr double kGap = 3.0;
// Polygons keep this distance (px) from the image border.
constexpr double kMargin = 2.0;
// Fonts are never shrunk below this scale to make a word fit.
constexpr double kMinFitScale = 0.15;
// Luminance difference between a legible word and its background.
constexpr double kMinContrast = 100.0;

constexpr double kPi = 3.14159265358979323846;

double luminance(const cv::Scalar& bgr) {
  return 0.114 * bgr[0] + 0.587 * bgr[1] + 0.299 * bgr[2];
}

// Standard normal draw (Box–Muller, one of the pair).
double gaussian(SampleRng& rng) {
  const double u1 = 1.0 - rng.uniform(0.0, 1.0);  // (0, 1]
  const double u2 = rng.uniform(0.0, 1.0);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
}

cv::Scalar random_colour(SampleRng& rng) {
  return cv::Scalar(rng.uniform(0, 256), rng.uniform(0, 256), rng.uniform(0, 256));
}

double clamp255(double v) { return std::min(255.0, std::max(0.0, v)); }

// Flat colour, linear gradient, or a smooth random texture. The colour never
// varies by more than ~80 per channel across the image, so a word contrasted
// against the mean under it stays legible everywhere.
cv::Mat make_background(int width, int height, SampleRng& rng) {
  const cv::Scalar base = random_colour(rng);
  const int kind = static_cast<int>(rng.integer(0, 2));
  cv::Mat img(height, width, CV_8UC3);
  if (kind == 0) {
    img.setTo(base);
    return img;
  }
  if (kind == 1) {
    cv::Scalar other;
    for (int c = 0; c < 3; ++c) other[c] = clamp255(base[c] + rng.uniform(-80, 80));
    const double theta = rng.uniform(0, 2 * kPi);
    const double dx = std::cos(theta), dy = std::sin(theta);
    const double cx = 0.5 * (width - 1), cy = 0.5 * (height - 1);
    const double half = std::max(1.0, 0.5 * (std::fabs(dx) * width + std::fabs(dy) * height));
    for (int y = 0; y < height; ++y) {
      auto* row = img.ptr<cv::Vec3b>(y);
      for (int x = 0; x < width; ++x) {
        const double t =
            std::min(1.0, std::max(0.0, 0.5 + 0.5 * ((x - cx) * dx + (y - cy) * dy) / half));
        for (int c = 0; c < 3; ++c) {
          row[x][c] = cv::saturate_cast<uchar>(base[c] + t * (other[c] - base[c]));
        }
      }
    }
    return img;
  }
  // Smooth texture: a coarse random grid, cubic-upsampled.
  const int gw = static_cast<int>(rng.integer(3, 24));
  const int gh = static_cast<int>(rng.integer(3, 24));
  const double amplitude = rng.uniform(10, 40);
  cv::Mat grid(gh, gw, CV_32FC3);
  for (int y = 0; y < gh; ++y) {
    for (int x = 0; x < gw; ++x) {
      const double shared = rng.uniform(-amplitude, amplitude);
      for (int c = 0; c < 3; ++c) {
        grid.at<cv::Vec3f>(y, x)[c] =
            static_cast<float>(base[c] + shared + rng.uniform(-8, 8));
      }
    }
  }
  cv::Mat smooth;
  cv::resize(grid, smooth, cv::Size(width, height), 0, 0, cv::INTER_CUBIC);
  smooth.convertTo(img, CV_8UC3);
  return img;
}

std::string random_word(SampleRng& rng) {
  static const std::string kLower = "abcdefghijklmnopqrstuvwxyz";
  static const std::string kUpper = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
  static const std::string kDigits = "0123456789";
  static const std::string kAll = kLower + kUpper + kDigits;
  const int style = static_cast<int>(rng.integer(0, 4));
  const int len = static_cast<int>(style == 3 ? rng.integer(1, 6) : rng.integer(2, 10));
  auto pick = [&rng](const std::string& set) {
    return set[static_cast<size_t>(rng.integer(0, static_cast<int64_t>(set.size()) - 1))];
  };
  std::string word;
  for (int i = 0; i < len; ++i) {
    switch (style) {
      case 0: word += pick(kLower); break;                    // lower
      case 1: word += pick(kUpper); break;                    // UPPER
      case 2: word += pick(i == 0 ? kUpper : kLower); break;  // Capitalised
      case 3: word += pick(kDigits); break;                   // 12345
      default: word += pick(kAll); break;                     // mIx3d
    }
  }
  return word;
}

// One word drawn unrotated on its own canvas.
struct WordCanvas {
  cv::Mat mask;             // CV_8UC1, anti-aliased ink in [0, 255]
  double x0, y0, x1, y1;    // text box in canvas pixel coordinates
};

WordCanvas draw_word(const std::string& text, int face, double scale, int thickness) {
  int baseline = 0;
  const cv::Size size = cv::getTextSize(text, face, scale, thickness, &baseline);
  // Room for glyph overhang (script faces reach ~1 text height sideways).
  const int pad = size.height + baseline + thickness + 4;
  WordCanvas w;
  w.mask = cv::Mat::zeros(size.height + baseline + 2 * pad, size.width + 2 * pad, CV_8UC1);
  const cv::Point org(pad, pad + size.height);
  cv::putText(w.mask, text, org, face, scale, cv::Scalar(255), thickness, cv::LINE_AA);
  w.x0 = org.x;
  w.y0 = org.y - size.height;
  w.x1 = org.x + size.width;
  w.y1 = org.y + baseline;
  const cv::Rect ink = cv::boundingRect(w.mask);
  if (ink.area() > 0) {
    w.x0 = std::min(w.x0, static_cast<double>(ink.x));
    w.y0 = std::min(w.y0, static_cast<double>(ink.y));
    w.x1 = std::max(w.x1, static_cast<double>(ink.x + ink.width - 1));
    w.y1 = std::max(w.y1, static_cast<double>(ink.y + ink.height - 1));
  }
  return w;
}

// Corners TL, TR, BR, BL of [x0, x1] × [y0, y1] grown by `grow`, mapped by
// the 2×3 affine matrix m.
Polygon transform_box(const cv::Matx23d& m, double x0, double y0, double x1, double y1,
                      double grow) {
  const std::array<cv::Point2d, 4> corners = {
      cv::Point2d(x0 - grow, y0 - grow), cv::Point2d(x1 + grow, y0 - grow),
      cv::Point2d(x1 + grow, y1 + grow), cv::Point2d(x0 - grow, y1 + grow)};
  Polygon poly;
  for (const auto& p : corners) {
    poly.push_back({m(0, 0) * p.x + m(0, 1) * p.y + m(0, 2),
                    m(1, 0) * p.x + m(1, 1) * p.y + m(1, 2)});
  }
  return poly;
}

cv::Rect bounding_pixels(const Polygon& poly, double grow, const cv::Size& image) {
  double x0 = poly[0].x, x1 = poly[0].x, y0 = poly[0].y, y1 = poly[0].y;
  for (const auto& p : poly) {
    x0 = std::min(x0, p.x);
    x1 = std::max(x1, p.x);
    y0 = std::min(y0, p.y);
    y1 = std::max(y1, p.y);
  }
  const int ix0 = std::max(0, static_cast<int>(std::floor(x0 - grow)));
  const int iy0 = std::max(0, static_cast<int>(std::floor(y0 - grow)));
  const int ix1 = std::min(image.width - 1, static_cast<int>(std::ceil(x1 + grow)));
  const int iy1 = std::min(image.height - 1, static_cast<int>(std::ceil(y1 + grow)));
  if (ix1 < ix0 || iy1 < iy0) return {};
  return {ix0, iy0, ix1 - ix0 + 1, iy1 - iy0 + 1};
}

cv::Scalar contrasting_colour(const cv::Scalar& bg, bool faint, SampleRng& rng) {
  if (faint) {
    // Barely visible: every channel shifted the same way by 8..20.
    const double sign = rng.uniform(0, 1) < 0.5 ? -1.0 : 1.0;
    const double shift = rng.uniform(8, 20);
    const double s = (luminance(bg) + sign * shift < 0 || luminance(bg) + sign * shift > 255)
                         ? -sign
                         : sign;
    cv::Scalar c;
    for (int k = 0; k < 3; ++k) c[k] = clamp255(bg[k] + s * shift);
    return c;
  }
  const double lb = luminance(bg);
  for (int attempt = 0; attempt < 16; ++attempt) {
    const cv::Scalar c = random_colour(rng);
    if (std::fabs(luminance(c) - lb) >= kMinContrast) return c;
  }
  const double v = lb > 127.5 ? rng.uniform(0, 30) : rng.uniform(225, 256);
  return cv::Scalar(v, v, v);
}

void validate(const RenderOptions& o) {
  auto fail = [](const std::string& what) {
    throw std::invalid_argument("render_synthetic_text: " + what);
  };
  if (o.width < 1 || o.height < 1) fail("width and height must be >= 1");
  if (o.min_words < 0 || o.max_words < o.min_words) {
    fail("need 0 <= min_words <= max_words");
  }
  if (!std::isfinite(o.min_font_scale) || !std::isfinite(o.max_font_scale) ||
      o.min_font_scale <= 0 || o.max_font_scale < o.min_font_scale) {
    fail("need 0 < min_font_scale <= max_font_scale, finite");
  }
  if (!(o.max_rotate_deg >= 0 && o.max_rotate_deg <= 180)) {
    fail("max_rotate_deg must lie in [0, 180]");
  }
  if (!std::isfinite(o.noise_sigma_max) || o.noise_sigma_max < 0) {
    fail("noise_sigma_max must be finite and >= 0");
  }
  if (!(o.blur_prob >= 0 && o.blur_prob <= 1)) fail("blur_prob must lie in [0, 1]");
  if (!(o.ignore_prob >= 0 && o.ignore_prob <= 1)) fail("ignore_prob must lie in [0, 1]");
  if (!std::isfinite(o.min_text_px) || o.min_text_px < 0) {
    fail("min_text_px must be finite and >= 0");
  }
  if (o.max_place_tries < 1) fail("max_place_tries must be >= 1");
}

// The word's mask, moved by `m` into `roi` of `image`, blended in `colour`.
void blend_word(cv::Mat& image, const cv::Rect& roi, const cv::Mat& mask, const cv::Matx23d& m,
                const cv::Scalar& colour) {
  cv::Matx23d m_roi = m;
  m_roi(0, 2) -= roi.x;
  m_roi(1, 2) -= roi.y;
  cv::Mat alpha;
  cv::warpAffine(mask, alpha, cv::Mat(m_roi), roi.size(), cv::INTER_LINEAR, cv::BORDER_CONSTANT, cv::Scalar(0));
  cv::Mat dst = image(roi);
  for (int y = 0; y < roi.height; ++y) {
    const uchar* a_row = alpha.ptr<uchar>(y);
    auto* d_row = dst.ptr<cv::Vec3b>(y);
    for (int x = 0; x < roi.width; ++x) {
      if (a_row[x] == 0) continue;
      const double a = a_row[x] / 255.0;
      for (int c = 0; c < 3; ++c) {
        d_row[x][c] = cv::saturate_cast<uchar>(d_row[x][c] * (1.0 - a) + colour[c] * a);
      }
    }
  }
}

// Sensor noise (a random sigma up to noise_sigma_max) and, with blur_prob,
// a Gaussian blur, after every word is drawn.
void add_noise_and_blur(cv::Mat& image, const RenderOptions& options, SampleRng& rng) {
  if (options.noise_sigma_max > 0) {
    const double sigma = rng.uniform(0, options.noise_sigma_max);
    for (int y = 0; y < image.rows; ++y) {
      uchar* row = image.ptr<uchar>(y);
      for (int x = 0; x < image.cols * 3; ++x) {
        row[x] = cv::saturate_cast<uchar>(row[x] + sigma * gaussian(rng));
      }
    }
  }
  if (options.blur_prob > 0 && rng.uniform(0, 1) < options.blur_prob) {
    const int k = rng.uniform(0, 1) < 0.5 ? 3 : 5;
    const double sigma = rng.uniform(0.6, 1.4);
    cv::GaussianBlur(image, image, cv::Size(k, k), sigma, sigma, cv::BORDER_REFLECT_101);
  }
}

}  // namespace

AnnotatedImage render_synthetic_text(uint64_t seed, int64_t index, const RenderOptions& options) {
  validate(options);
  SampleRng rng(seed, kStreamTag, index);
  const int width = options.width, height = options.height;

  AnnotatedImage out;
  out.image = make_background(width, height, rng);
  std::vector<Polygon> grown_placed;

  const double log_min = std::log(options.min_font_scale);
  const double log_max = std::log(options.max_font_scale);
  const double avail_w = (width - 1) - 2 * kMargin;
  const double avail_h = (height - 1) - 2 * kMargin;

  const int n_words = static_cast<int>(rng.integer(options.min_words, options.max_words));
  for (int w = 0; w < n_words; ++w) {
    const std::string text = random_word(rng);
    const bool hard = rng.uniform(0, 1) < options.ignore_prob;
    const bool faint = hard && rng.uniform(0, 1) < 0.5;
    const bool tiny = hard && !faint;

    for (int attempt = 0; attempt < options.max_place_tries; ++attempt) {
      int face = static_cast<int>(rng.integer(0, 7));
      if (rng.uniform(0, 1) < 0.25) face |= cv::FONT_ITALIC;
      double scale = tiny ? options.min_font_scale * rng.uniform(0.3, 0.5)
                          : std::exp(rng.uniform(log_min, log_max));
      const int max_thickness = std::max(1, static_cast<int>(std::lround(scale * 2.2)));
      const int thickness = tiny ? 1 : static_cast<int>(rng.integer(1, max_thickness));
      const double angle =
          rng.uniform(0, 1) < 1.0 / 3.0
              ? 0.0
              : rng.uniform(-options.max_rotate_deg, options.max_rotate_deg);
      const double rad = angle * kPi / 180.0;
      const double ca = std::cos(rad), sa = std::sin(rad);

      // Render; shrink the font until the rotated box fits the image.
      WordCanvas canvas;
      double half_w = 0, half_h = 0;
      bool fits = false;
      for (int shrink = 0; shrink < 4 && scale >= kMinFitScale; ++shrink) {
        canvas = draw_word(text, face, scale, thickness);
        const double bw = canvas.x1 - canvas.x0, bh = canvas.y1 - canvas.y0;
        half_w = 0.5 * (std::fabs(ca) * bw + std::fabs(sa) * bh);
        half_h = 0.5 * (std::fabs(sa) * bw + std::fabs(ca) * bh);
        if (2 * half_w <= avail_w && 2 * half_h <= avail_h) {
          fits = true;
          break;
        }
        scale *= 0.95 * std::min(avail_w / std::max(1e-9, 2 * half_w),
                                 avail_h / std::max(1e-9, 2 * half_h));
      }
      if (!fits) continue;

      // Rotation by `angle` (counter-clockwise on screen, as
      // cv::getRotationMatrix2D) about the box centre, moved to a random
      // centre that keeps the quad inside the image.
      const double cx = rng.uniform(kMargin + half_w, (width - 1) - kMargin - half_w);
      const double cy = rng.uniform(kMargin + half_h, (height - 1) - kMargin - half_h);
      const double bcx = 0.5 * (canvas.x0 + canvas.x1), bcy = 0.5 * (canvas.y0 + canvas.y1);
      const cv::Matx23d m(ca, sa, cx - (ca * bcx + sa * bcy),  //
                          -sa, ca, cy - (-sa * bcx + ca * bcy));

      Polygon grown = transform_box(m, canvas.x0, canvas.y0, canvas.x1, canvas.y1, kGap);
      bool overlaps = false;
      for (const auto& other : grown_placed) {
        if (polygon_intersection_area(grown, other) > 0) {
          overlaps = true;
          break;
        }
      }
      if (overlaps) continue;

      Polygon quad = transform_box(m, canvas.x0, canvas.y0, canvas.x1, canvas.y1, 0.0);
      const cv::Rect roi = bounding_pixels(quad, 2.0, out.image.size());
      if (roi.area() == 0) continue;

      const cv::Scalar colour = contrasting_colour(cv::mean(out.image(roi)), faint, rng);
      blend_word(out.image, roi, canvas.mask, m, colour);

      const double box_thin = std::min(canvas.x1 - canvas.x0, canvas.y1 - canvas.y0);
      TextInstance t;
      t.polygon = std::move(quad);
      t.ignore = hard || box_thin < options.min_text_px;
      out.texts.push_back(std::move(t));
      grown_placed.push_back(std::move(grown));
      break;
    }
  }

  add_noise_and_blur(out.image, options, rng);
  return out;
}

}  // namespace dbh::model
