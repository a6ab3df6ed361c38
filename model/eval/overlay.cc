#include "model/eval/overlay.h"

#include <cmath>
#include <opencv2/imgproc.hpp>
#include <stdexcept>
#include <string>

namespace dbh::model {
namespace {

constexpr int kShift = 4;  // cv::polylines fixed-point fraction bits.
constexpr double kMaxDrawCoordinate = 1048576.0;  // 2^20 px.
constexpr int kThickness = 2;
constexpr double kBlackMean = 2.0;
constexpr double kBlackMax = 10.0;

const cv::Scalar kGtColor(0, 255, 0);
const cv::Scalar kIgnoredColor(128, 128, 128);
const cv::Scalar kDetColor(0, 0, 255);

void draw(cv::Mat& canvas, const Polygon& poly, const cv::Scalar& color) {
  if (poly.size() < 2) return;
  std::vector<cv::Point> pts;
  pts.reserve(poly.size());
  for (const Point& p : poly) {
    if (!std::isfinite(p.x) || !std::isfinite(p.y) ||
        std::fabs(p.x) > kMaxDrawCoordinate ||
        std::fabs(p.y) > kMaxDrawCoordinate) {
      return;
    }
    pts.emplace_back(static_cast<int>(std::lround(p.x * (1 << kShift))),
                     static_cast<int>(std::lround(p.y * (1 << kShift))));
  }
  cv::polylines(canvas, std::vector<std::vector<cv::Point>>{pts},
                /*isClosed=*/true, color, kThickness, cv::LINE_AA, kShift);
}

}  // namespace

cv::Mat draw_overlay(const cv::Mat& image_bgr8, const std::vector<Polygon>& gt,
                     const std::vector<bool>& gt_ignore,
                     const std::vector<Polygon>& det) {
  if (!gt_ignore.empty() && gt_ignore.size() != gt.size()) {
    throw std::invalid_argument(
        "draw_overlay: expected no gt_ignore flags or one per ground truth (" +
        std::to_string(gt.size()) + "), got " +
        std::to_string(gt_ignore.size()));
  }
  if (image_bgr8.empty()) return {};
  cv::Mat canvas;
  if (image_bgr8.type() == CV_8UC3) {
    canvas = image_bgr8.clone();
  } else if (image_bgr8.type() == CV_8UC1) {
    cv::cvtColor(image_bgr8, canvas, cv::COLOR_GRAY2BGR);
  } else {
    throw std::invalid_argument(
        "draw_overlay: expected a CV_8UC3 (or CV_8UC1) image, got type " +
        std::to_string(image_bgr8.type()));
  }
  for (std::size_t i = 0; i < gt.size(); ++i) {
    const bool ignored = !gt_ignore.empty() && gt_ignore[i];
    draw(canvas, gt[i], ignored ? kIgnoredColor : kGtColor);
  }
  // Predictions last so they stay visible where they cover the ground truth.
  for (const Polygon& d : det) draw(canvas, d, kDetColor);
  return canvas;
}

cv::Mat denormalize_to_bgr8(const cv::Mat& normalised) {
  if (normalised.empty()) return {};
  if (normalised.type() != CV_32FC3) {
    throw std::invalid_argument(
        "denormalize_to_bgr8: expected a CV_32FC3 RGB image, got type " +
        std::to_string(normalised.type()));
  }
  cv::Mat rgb;
  cv::multiply(normalised,
               cv::Scalar(kImageNetStd[0], kImageNetStd[1], kImageNetStd[2]),
               rgb);
  cv::add(rgb, cv::Scalar(kImageNetMean[0], kImageNetMean[1], kImageNetMean[2]),
          rgb);
  cv::patchNaNs(rgb, 0.0);
  cv::Mat rgb8;
  rgb.convertTo(rgb8, CV_8UC3, 255.0);  // Rounds and saturates.
  cv::Mat bgr8;
  cv::cvtColor(rgb8, bgr8, cv::COLOR_RGB2BGR);
  return bgr8;
}

bool looks_all_black(const cv::Mat& bgr8) {
  if (bgr8.empty()) return true;
  if (bgr8.depth() != CV_8U) {
    throw std::invalid_argument(
        "looks_all_black: expected an 8-bit image, got type " +
        std::to_string(bgr8.type()));
  }
  // One-channel view of a continuous copy: cv::mean and cv::minMaxLoc then
  // cover every channel, whatever their count.
  const cv::Mat flat = (bgr8.isContinuous() ? bgr8 : bgr8.clone()).reshape(1);
  const double mean = cv::mean(flat)[0];
  double max = 0.0;
  cv::minMaxLoc(flat, nullptr, &max);
  return mean < kBlackMean && max < kBlackMax;
}

}  // namespace dbh::model
